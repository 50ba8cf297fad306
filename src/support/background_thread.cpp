// Background threads at idle priority (see kiln/background_thread.h).
#include "kiln/background_thread.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace kiln {

void become_background_thread(const char* name) {
  pthread_setname_np(pthread_self(), name);
  sched_param none{};
  if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &none) != 0) {
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
  }
}

}  // namespace kiln
