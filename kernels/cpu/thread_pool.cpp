#include "thread_pool.h"

#include <pthread.h>
#include <signal.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace phasekv {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
// Workers spin this many rounds for the next op before sleeping: decode issues a few
// hundred short ops per token, and a sleep/wake per op would cost more than the op.
constexpr int kSpinRounds = 1 << 12;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads), ranges_(size_t(n_threads_)) {
  workers_.reserve(size_t(n_threads_ - 1));
  // Workers start with every asynchronous signal blocked (a thread inherits its creator's mask):
  // Ctrl-C, SIGTERM and the like go to the application's own threads and their handlers, never
  // to a compute worker in the middle of a kernel.
  sigset_t all, old;
  sigfillset(&all);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) sigdelset(&all, sig);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back(&ThreadPool::worker, this, i);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  // Return once every worker runs: the threads' start-up (stack, TLS, a sanitizer's per-thread
  // state) is then part of creating the context -- its memory in the RSS a caller measures
  // right after, its time out of the first op.
  while (started_.load(std::memory_order_acquire) < n_threads_ - 1) std::this_thread::yield();
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::work(int thread) {
  // Its own range first, then the next threads' in turn: a thread that finishes early takes
  // tasks from the front of a range its owner has not reached yet.
  for (int i = 0; i < n_threads_; ++i) {
    Range& r = ranges_[size_t((thread + i) % n_threads_)];
    for (;;) {
      const int task = r.next.fetch_add(1, std::memory_order_relaxed);
      if (task >= r.end) break;
      fn_(ctx_, task, thread);
    }
  }
}

void ThreadPool::worker(int index) {
  started_.fetch_add(1, std::memory_order_release);
  unsigned seen = 0;
  for (;;) {
    unsigned gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinRounds; ++spin) {
      cpu_relax();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleeping_.fetch_add(1, std::memory_order_seq_cst);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
      sleeping_.fetch_sub(1);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    work(index);
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(int n_tasks, TaskFn fn, void* ctx) {
  if (n_threads_ == 1 || n_tasks <= 1) {
    for (int t = 0; t < n_tasks; ++t) fn(ctx, t, 0);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  for (int i = 0; i < n_threads_; ++i) {
    ranges_[size_t(i)].next.store(int(int64_t(n_tasks) * i / n_threads_), std::memory_order_relaxed);
    ranges_[size_t(i)].end = int(int64_t(n_tasks) * (i + 1) / n_threads_);
  }
  done_.store(0, std::memory_order_relaxed);
  // Publish the op, then wake sleepers. Both sides use sequentially consistent operations
  // (a worker increments sleeping_ and then re-reads generation_ under the lock), so either
  // the worker sees the new generation or this thread sees it sleeping and notifies.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  work(0);
  const int workers = n_threads_ - 1;
  while (done_.load(std::memory_order_acquire) < workers) cpu_relax();
}

}  // namespace phasekv
