#include "amber/train/stop_signals.h"

#include <signal.h>

namespace amber {
namespace {

volatile sig_atomic_t caught = 0;
struct sigaction previous_int, previous_term;

void remember(int signal) { caught = signal; }

}  // namespace

StopSignals::StopSignals() {
  caught = 0;
  struct sigaction action {};
  action.sa_handler = remember;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;  // a second signal is not caught
  sigaction(SIGINT, &action, &previous_int);
  sigaction(SIGTERM, &action, &previous_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &previous_int, nullptr);
  sigaction(SIGTERM, &previous_term, nullptr);
}

int StopSignals::received() const { return caught; }

}  // namespace amber
