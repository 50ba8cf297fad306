// Random number generators of the device.
//
// A device generator wraps a CPU generator: library kernels are the CPU
// implementations, and they accept only CPU generators. The dispatcher swaps
// a device generator (or the default one, for ops called without) for its
// host_generator() when it launches a random op. State changes wait for the
// device's queue first, so pending random ops consume the state they were
// issued against.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

namespace kiln::dispatch {

class NeuronGenerator final : public c10::GeneratorImpl {
 public:
  explicit NeuronGenerator(c10::DeviceIndex index, uint64_t seed = c10::default_rng_seed_val);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  const at::Generator& host_generator() const { return host_; }

 private:
  NeuronGenerator* clone_impl() const override;
  void wait_for_device() const;
  at::Generator host_;
};

const at::Generator& default_generator(c10::DeviceIndex index);
at::Generator new_generator(c10::DeviceIndex index);

// The CPU generator a launch should use in place of `gen` (a device generator
// or none, meaning the default generator of `index`).
at::Generator host_generator_for(const std::optional<at::Generator>& gen, c10::DeviceIndex index);

}  // namespace kiln::dispatch
