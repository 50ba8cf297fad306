#pragma once
#include <c10/core/Allocator.h>

namespace kiln::dispatch {
at::Allocator* pinned_host_allocator();
bool is_pinned_host_ptr(const void* ptr);
}  // namespace kiln::dispatch
