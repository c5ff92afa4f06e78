// SIGINT and SIGTERM while a run trains: instead of dying mid-step (and losing the work
// since the last checkpoint), the run finishes the step it is in, writes a checkpoint
// and stops, so that --resume continues it. A cluster's scheduler sends SIGTERM before
// it takes the machine back; Ctrl-C sends SIGINT. A second signal acts as if nothing
// caught it: the handlers reset themselves after the first.
#pragma once

namespace amber {

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // puts back the ones it replaced
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // The signal caught since construction, or 0.
  int received() const;
};

}  // namespace amber
