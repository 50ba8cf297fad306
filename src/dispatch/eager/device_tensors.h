// Device tensors: allocation, storage resize, host views and uploads, for
// every kernel file of the backend.
#pragma once

#include <ATen/ATen.h>

namespace kiln::dispatch {

// A device tensor with the given geometry, allocated from the device's pool.
at::Tensor empty_device(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                        c10::DeviceIndex index);

// Grows (or shrinks) a device storage to `nbytes`, keeping its contents.
// Waits for the device first: pending launches may still use the old bytes.
void resize_device_storage(const c10::Storage& storage, size_t nbytes);

// A CPU tensor viewing the same bytes as `t` (a device tensor): same sizes,
// strides, offset, conj/neg bits. Valid while the device memory is. What a
// library kernel computes on, on the device's queue (the emulated device runs
// host code), and what the host path reads after a sync.
at::Tensor host_alias(const at::Tensor& t);

// Copies CPU tensor `src` into device tensor `dst` (broadcast and dtype
// conversion as copy_ does) through the device's host-to-device copy, after
// what the device recorded. The caller may change `src` at once.
void copy_host_to_device(const at::Tensor& src, const at::Tensor& dst);

}  // namespace kiln::dispatch
