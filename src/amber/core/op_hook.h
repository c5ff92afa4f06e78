// Where the benchmark tools (bench/) observe op entry points: `amber bench step
// --profile` times each op's work (GPU or CPU) and `--twice OP` runs one op a second
// time in every call. Production code installs no hook; an entry point then pays one load and
// one branch at each point.
#pragma once

#include <atomic>

namespace amber {

// A borrowed callable: an op call that a hook runs once or more.
class OpWork {
 public:
  template <class F>
  explicit OpWork(F& f)
      : object_(const_cast<void*>(static_cast<const void*>(&f))), call_([](void* o) { (*static_cast<F*>(o))(); }) {}
  void operator()() const { call_(object_); }

 private:
  void* object_;
  void (*call_)(void*);
};

class OpHook {
 public:
  virtual ~OpHook() = default;
  // Brackets the work of an op (every entry point's CUDA or CPU branch, and the step's
  // own work outside any op); on_host says which. Brackets nest.
  virtual void enter(const char* op, bool on_host) = 0;
  virtual void leave(bool on_host) = 0;
  // One whole call of an op whose second run would write the same bits as its first.
  virtual void call_repeatable(const char* op, OpWork work) = 0;
};

namespace detail {
inline std::atomic<OpHook*> installed_op_hook{nullptr};
}  // namespace detail

// The hook installed now, or null.
inline OpHook* op_hook() { return detail::installed_op_hook.load(std::memory_order_acquire); }
// Installs `hook` (null removes it). The tools install and remove it between steps,
// never while an op runs.
inline void set_op_hook(OpHook* hook) { detail::installed_op_hook.store(hook, std::memory_order_release); }

// Brackets the work done (on the host) or issued (to a GPU) until the scope ends as op
// `op`'s.
class OpScope {
 public:
  OpScope(const char* op, bool on_host) : hook_(op_hook()), on_host_(on_host) {
    if (hook_) hook_->enter(op, on_host_);
  }
  ~OpScope() {
    if (hook_) hook_->leave(on_host_);
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpHook* hook_;
  bool on_host_;
};

// Runs `work`, one whole call of the repeatable op `op`, through the installed hook.
template <class F>
void call_repeatable(const char* op, F&& work) {
  if (OpHook* hook = op_hook())
    hook->call_repeatable(op, OpWork(work));
  else
    work();
}

}  // namespace amber
