// The tools' op hook (core/op_hook.h): the profiler's brackets (bench/op_profile.h) and
// --twice's second runs (bench/op_repeat.h), installed while either is on.
#pragma once

namespace amber::profile {

// Installs the hook while profiling is active or an op runs twice, removes it otherwise.
void update_hook();

}  // namespace amber::profile
