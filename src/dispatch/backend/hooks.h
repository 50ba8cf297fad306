// PrivateUse1HooksInterface registration.
#pragma once

namespace kiln::dispatch {

// Registers the device's hooks with ATen (once; later calls do nothing).
void register_hooks();

}  // namespace kiln::dispatch
