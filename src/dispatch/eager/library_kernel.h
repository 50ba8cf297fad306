// The device's generic kernel (see library_kernel.cpp).
#pragma once

namespace kiln::dispatch {

// Registers the library kernel for the ATen ops whose composite kernel
// would otherwise run on the device (once; later calls do nothing). Needs
// every op registered: called at kiln's start-up, not at library load.
void route_composite_ops_to_library_kernel();

}  // namespace kiln::dispatch
