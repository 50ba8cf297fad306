// Copies between host and device and between devices (aten::_copy_from,
// which copy_, .to() and .cpu() reach for a non-CPU device).
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/Copy.h>
#include <ATen/ops/copy_native.h>
#include <torch/library.h>

#include "dispatch/backend/devices.h"
#include "dispatch/backend/sync.h"
#include "dispatch/backend/torch_errors.h"
#include "dispatch/eager/device_tensors.h"
#include "dispatch/eager/op_info.h"
#include "dispatch/eager/tensor_alias.h"
#include "dispatch/lazy/record.h"
#include "kiln/metrics.h"
#include "kiln/recorder.h"

namespace kiln::dispatch {
namespace {

// The copy as a launch on the device: its CPU copy over aliases of the
// device memory. One alias set: overlapping source and destination look
// overlapping to the CPU copy, as they would on CPU.
//
// Only a copy from another device keeps the source's storage alive until
// it ran: within one device, a source freed meanwhile goes back to the pool
// behind the copy on the same queue. Holding it there too would make its
// use count depend on whether the device got to the copy yet, and autograd
// decides by use counts whether it sums gradients in place (`add_`) or not
// (`add`): the ops a backward records, and so the traces the adaptive policy
// counts, would depend on thread timing.
trace::HeldLaunch copy_launch(const at::Tensor& src, const at::Tensor& dst) {
  AliasSet aliases(c10::DispatchKey::CPU);
  c10::Storage keep = src.device() != dst.device() ? src.storage() : c10::Storage();
  return {"copy device->device",
          [s = aliases.alias(src), d = aliases.alias(dst), keep = std::move(keep)]() mutable { d.copy_(s); },
          [bytes = dst.nbytes()] { Metrics::global().add(Counter::BytesCopied, "device_to_device", bytes); }};
}

// In lazy mode a copy within one device is a traced pointwise op (clone,
// contiguous and reshape of a non-viewable tensor reach it): it fuses with
// what produces and reads it instead of flushing the trace. Its lowering
// (copy_in_place, lowering_table.cpp) declines the copies eager refuses; they launch as before.
Recorded record_copy(const at::Tensor& src, const at::Tensor& dst) {
  if (!trace::lazy_mode()) return Recorded::No;  // before the op info lookup: eager mode never needs it
  static const OpInfo& info = op_info_for(c10::Dispatcher::singleton().findSchemaOrThrow("aten::copy_", ""));
  const torch::jit::Stack stack{dst, src, false};
  const c10::IValue output(dst);
  const bool fresh = false;  // written in place
  return try_record(info, stack, 0, dst.device().index(), c10::ArrayRef<c10::IValue>(output),
                    c10::ArrayRef<bool>(fresh), [&] { return copy_launch(src, dst); });
}

void copy_device_to_device(const at::Tensor& src, const at::Tensor& dst) {
  if (record_copy(src, dst) != Recorded::No) return;
  runtime::Device& dst_dev = device(dst.device().index());
  if (src.device() != dst.device()) {
    // The source's pending writes land first; its storage stays alive until
    // the destination's launch ran.
    synchronize(device(src.device().index()), "cross-device copy");
  }
  trace::HeldLaunch launch = copy_launch(src, dst);
  launch.count();
  enqueue(dst_dev, launch.name, std::move(launch.work));
}

// Whether `t`'s elements are its storage bytes from its offset on, in order.
bool is_plain(const at::Tensor& t) { return t.is_contiguous() && !t.is_conj() && !t.is_neg(); }

// A contiguous device tensor with `t`'s values (`t` itself when it is one).
at::Tensor plain_device_copy(const at::Tensor& t) {
  if (is_plain(t)) return t;
  at::Tensor out = empty_device(t.sizes(), c10::contiguous_strides(t.sizes()), t.scalar_type(), t.device().index());
  out.copy_(t);
  return out;
}

}  // namespace

void copy_host_to_device(const at::Tensor& src, const at::Tensor& dst) {
  Metrics::global().add(Counter::BytesCopied, "host_to_device", dst.nbytes());
  runtime::Device& dev = device(dst.device().index());
  // The device reads the bytes later: a plain source of dst's dtype is
  // snapshotted by the device, any other is staged here, in dst's dtype
  // and shape, which the device keeps until the copy ran (a blocking copy
  // lets the caller reuse its tensor at once).
  const bool direct = is_plain(src) && src.scalar_type() == dst.scalar_type() && src.sizes() == dst.sizes();
  const at::Tensor plain_dst = is_plain(dst) ? dst : at::Tensor();
  const at::Tensor target = plain_dst.defined() ? plain_dst
                                                : empty_device(dst.sizes(), c10::contiguous_strides(dst.sizes()),
                                                               dst.scalar_type(), dst.device().index());
  flush_trace(dev, "untraced op");  // what the program issued before this runs before it
  delivering_launch_errors("launch blocking", [&] {
    if (direct) {
      dev.copy_from_host(target.data_ptr(), src.const_data_ptr(), dst.nbytes());
    } else {
      at::Tensor staged = at::empty(dst.sizes(), dst.options().device(c10::kCPU));
      staged.copy_(src);
      dev.copy_from_host(target.data_ptr(), std::make_shared<c10::Storage>(staged.storage()), staged.const_data_ptr(),
                         dst.nbytes());
    }
  });
  if (!plain_dst.defined()) dst.copy_(target);  // into a strided view: on the device
}

namespace {

void copy_device_to_host(const at::Tensor& src, const at::Tensor& dst) {
  const at::Tensor plain = plain_device_copy(src);
  runtime::Device& dev = device(src.device().index());
  synchronize(dev, "copy to host");
  Metrics::global().add(Counter::BytesCopied, "device_to_host", src.nbytes());
  // Straight into dst when it is laid out as the source's bytes; else staged
  // on the host, and dst.copy_ broadcasts and converts there.
  const bool direct = is_plain(dst) && dst.scalar_type() == src.scalar_type() && dst.sizes() == src.sizes();
  const at::Tensor staged = direct ? dst : at::empty(plain.sizes(), plain.options().device(c10::kCPU));
  with_torch_errors([&] { dev.copy_to_host(staged.data_ptr(), plain.const_data_ptr(), plain.nbytes()); });
  if (!direct) dst.copy_(staged);
}

// Eager's argument checks of copy_, at the call whichever way the copy
// then runs (a launched copy would raise them at the next sync).
void check_copy_arguments(const at::Tensor& src, const at::Tensor& dst) {
  if (!at::is_expandable_to(src.sizes(), dst.sizes())) {
    // TensorIterator's broadcast error, word for word, from meta twins.
    auto meta = [](const at::Tensor& t) {
      return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
    };
    const at::Tensor out = meta(dst), in = meta(src);
    at::TensorIteratorConfig().add_output(out).add_const_input(in).resize_outputs(false).build();
  }
  at::assert_no_internal_overlap(dst);
  at::assert_no_partial_overlap(dst, src);
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  const TimeScope timing(TimeCategory::HostRecord);  // host_record_s (kiln.metrics.breakdown)
  TORCH_CHECK(self.defined() && dst.defined(), "copy: source and destination must be defined");
  // Views of the same data (two slices of one expanded tensor): eager's
  // copy_ returns before any check, as there is nothing to move.
  if (dst.is_alias_of(self) && dst.storage_offset() == self.storage_offset() && dst.sizes() == self.sizes() &&
      dst.strides() == self.strides() && dst.scalar_type() == self.scalar_type() && dst.is_conj() == self.is_conj() &&
      dst.is_neg() == self.is_neg()) {
    return dst;
  }
  check_copy_arguments(self, dst);  // empty tensors too: eager checks before it sees there is nothing to copy
  if (dst.numel() == 0) return dst;
  return with_torch_errors([&] {
    const bool src_dev = self.is_privateuseone(), dst_dev = dst.is_privateuseone();
    if (src_dev && dst_dev) copy_device_to_device(self, dst);
    else if (dst_dev && self.is_cpu()) copy_host_to_device(self, dst);
    else if (src_dev && dst.is_cpu()) copy_device_to_host(self, dst);
    else TORCH_CHECK(false, "kiln cannot copy from ", self.device(), " to ", dst.device(), "; copy through the CPU");
    return dst;
  });
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  const TimeScope timing(TimeCategory::HostRecord);
  return at::native::copy_(self, src, non_blocking);
}

}  // namespace

// The copies read the conj/neg bits themselves (host aliases keep them), as
// copy_ does: without these fallthroughs the conjugate fallback would
// materialize the source with clone(), which copies, which recurses.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) { m.impl("_copy_from", torch::CppFunction::makeFallthrough()); }
TORCH_LIBRARY_IMPL(aten, Negative, m) { m.impl("_copy_from", torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("copy_", copy_);
}

}  // namespace kiln::dispatch
