// A fixed pool of worker threads created with a context and reused for every op. run()
// splits task indices 0..n_tasks-1 into one contiguous range per thread; a thread takes its own
// range's tasks in order, then helps with the others' (work stealing from the front of a
// range); the caller's thread works too. No allocation after construction. Results must not
// depend on which thread runs a task (kernels split work by whole rows/heads), so the thread
// count never changes a bit.
#pragma once

#include <atomic>
#include <cstdint>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace phasekv {

class ThreadPool {
 public:
  using TaskFn = void (*)(void* ctx, int task, int thread);

  explicit ThreadPool(int n_threads);  // n_threads >= 1 (1 = no workers)
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Workers that have started running: size() - 1 from the moment the constructor returns.
  int workers_started() const { return started_.load(std::memory_order_acquire); }
  // Runs fn(ctx, task, thread) for every task in [0, n_tasks); returns when all are done.
  void run(int n_tasks, TaskFn fn, void* ctx);

 private:
  void worker(int index);
  void work(int thread);

  int n_threads_;
  std::vector<std::thread> workers_;
  // Each op's fields, and then every counter another thread spins on or increments, on a cache
  // line of its own: sharing one line, a worker's spin on generation_ and every task grab on
  // next_ took the line from the thread that was writing the next (false sharing; decode issues
  // ~150 ops a token, 16 task grabs each at 2 threads: docs/PERFORMANCE.md, nineteenth session).
  alignas(64) TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  // One range of tasks per thread, each on a cache line of its own: a thread's grabs from its
  // own range touch a line no other thread writes until it comes to help at the end (one shared
  // counter made every grab a contended atomic, ~75 ns: docs/PERFORMANCE.md, nineteenth and
  // twenty-first sessions).
  struct alignas(64) Range {
    std::atomic<int> next{0};
    int end = 0;
  };
  std::vector<Range> ranges_;  // n_threads_ of them, sized in the constructor
  alignas(64) std::atomic<int> done_{0};
  alignas(64) std::atomic<unsigned> generation_{0};
  alignas(64) std::atomic<int> sleeping_{0};
  alignas(64) std::atomic<int> started_{0};  // workers that have entered worker(): the constructor waits for all
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace phasekv
