#include "dispatch/backend/generator.h"
#include "dispatch/backend/devices.h"
#include "dispatch/backend/sync.h"

#include <mutex>
#include <vector>

namespace kiln::dispatch {

NeuronGenerator::NeuronGenerator(c10::DeviceIndex index, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::kPrivateUse1, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      host_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

void NeuronGenerator::wait_for_device() const {
  synchronize(kiln::dispatch::device(device_.index()), "generator state");
}

void NeuronGenerator::set_current_seed(uint64_t seed) {
  wait_for_device();
  host_.set_current_seed(seed);
}
void NeuronGenerator::set_offset(uint64_t offset) {
  wait_for_device();
  host_.set_offset(offset);
}
uint64_t NeuronGenerator::get_offset() const {
  wait_for_device();
  return host_.get_offset();
}
uint64_t NeuronGenerator::current_seed() const { return host_.current_seed(); }
uint64_t NeuronGenerator::seed() {
  wait_for_device();
  return host_.seed();
}
void NeuronGenerator::set_state(const c10::TensorImpl& new_state) {
  wait_for_device();
  host_.unsafeGetGeneratorImpl()->set_state(new_state);
}
c10::intrusive_ptr<c10::TensorImpl> NeuronGenerator::get_state() const {
  wait_for_device();
  return host_.unsafeGetGeneratorImpl()->get_state();
}
NeuronGenerator* NeuronGenerator::clone_impl() const {
  wait_for_device();
  auto* g = new NeuronGenerator(device_.index());
  g->host_ = host_.clone();
  return g;
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  static std::once_flag once;
  static std::vector<at::Generator> generators;
  std::call_once(once, [] {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      generators.push_back(at::make_generator<NeuronGenerator>(i));
    }
  });
  if (index < 0) index = current_device();
  kiln::dispatch::device(index);  // validates the index
  return generators[index];
}

at::Generator new_generator(c10::DeviceIndex index) {
  if (index < 0) index = current_device();
  kiln::dispatch::device(index);
  return at::make_generator<NeuronGenerator>(index);
}

at::Generator host_generator_for(const std::optional<at::Generator>& gen, c10::DeviceIndex index) {
  if (!gen.has_value() || !gen->defined()) {
    return static_cast<NeuronGenerator*>(default_generator(index).unsafeGetGeneratorImpl())->host_generator();
  }
  if (gen->device().type() == c10::kPrivateUse1) {
    return static_cast<NeuronGenerator*>(gen->unsafeGetGeneratorImpl())->host_generator();
  }
  return *gen;  // a CPU generator: the CPU kernel will say whether it accepts it
}

}  // namespace kiln::dispatch
