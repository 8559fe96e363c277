// The CPU backend's thread pool on its own: every task of every op runs exactly once, on a
// thread index inside the pool, with the op's writes visible to the caller when run() returns;
// across hand-offs while the workers spin and after they have fallen asleep; and a pool is
// destroyed cleanly with its workers asleep or mid-spin. Run under ThreadSanitizer in CI
// (preset tsan) and under qemu-aarch64 in the cross builds.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "thread_pool.h"

using phasekv::ThreadPool;

namespace {
struct Op {
  std::vector<int> hits;           // written by the tasks (plain ints: a race shows up in TSan)
  std::atomic<int> bad_thread{0};  // tasks that saw a thread index outside [0, size)
  int size = 0;
};

void count(void* ctx, int task, int thread) {
  Op* op = static_cast<Op*>(ctx);
  op->hits[size_t(task)] += 1;
  if (thread < 0 || thread >= op->size) op->bad_thread.fetch_add(1);
}
}  // namespace

TEST_CASE("thread pool: every task runs once per op, with 1 to 4 threads, spinning or asleep") {
  for (int n : {1, 2, 3, 4}) {
    CAPTURE(n);
    ThreadPool pool(n);
    CHECK(pool.size() == n);
    Op op;
    op.size = n;
    int ops = 0;
    for (int round = 0; round < 3; ++round) {
      // Back-to-back ops (workers still spinning), task counts below, at and above the pool size.
      for (int i = 0; i < 300; ++i, ++ops) {
        const int tasks = 1 + (i * 7) % 19;
        op.hits.assign(size_t(tasks), 0);
        pool.run(tasks, count, &op);
        int total = 0;
        for (int h : op.hits) {
          CHECK(h == 1);
          total += h;
        }
        REQUIRE(total == tasks);
      }
      // Long enough for every worker to give up spinning and sleep on the condition variable.
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    op.hits.assign(0, 0);
    pool.run(0, count, &op);  // no tasks: returns at once
    CHECK(op.bad_thread.load() == 0);
    CHECK(ops == 900);
  }
}

TEST_CASE("thread pool: the constructor returns with every worker running") {
  // Context creation measures its memory right after the pool is built (bench's RSS check):
  // a worker still starting would add its stack and per-thread state later, at random.
  for (int round = 0; round < 20; ++round) {
    for (int n : {1, 2, 4, 8}) {
      CAPTURE(n);
      ThreadPool pool(n);
      CHECK(pool.workers_started() == n - 1);
    }
  }
}

TEST_CASE("thread pool: destroyed while its workers spin, and while they sleep") {
  for (int sleep_ms : {0, 30}) {
    ThreadPool pool(3);
    Op op;
    op.size = 3;
    op.hits.assign(8, 0);
    pool.run(8, count, &op);
    if (sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    for (int h : op.hits) CHECK(h == 1);
  }  // ~ThreadPool joins the workers; a hang here is the failure
}

namespace {
struct SlowOp {
  std::vector<int> hits;
  std::vector<int> thread_of;
  std::atomic<int> caller_tasks{0};
};

// The caller's first task stalls (as a thread descheduled by the OS or slowed by a neighbour does);
// the other threads must take over the rest of its range.
void slow_caller(void* ctx, int task, int thread) {
  SlowOp* op = static_cast<SlowOp*>(ctx);
  op->hits[size_t(task)] += 1;
  op->thread_of[size_t(task)] = thread;
  if (thread == 0 && op->caller_tasks.fetch_add(1) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
}
}  // namespace

TEST_CASE("thread pool: a stalled thread's tasks are taken over by the others") {
  // run() gives each thread a contiguous range of the tasks; a thread done with its own takes
  // from the others'. While the caller sits in its first task, the workers finish everything else.
  for (int n : {2, 3, 4}) {
    CAPTURE(n);
    ThreadPool pool(n);
    SlowOp op;
    const int tasks = 8 * n;
    op.hits.assign(size_t(tasks), 0);
    op.thread_of.assign(size_t(tasks), -1);
    pool.run(tasks, slow_caller, &op);
    for (int h : op.hits) CHECK(h == 1);
    CHECK(op.caller_tasks.load() <= 1);
    int in_callers_range_by_others = 0;
    for (int t = 0; t < tasks / n; ++t) in_callers_range_by_others += op.thread_of[size_t(t)] != 0;
    CHECK(in_callers_range_by_others >= tasks / n - 1);
  }
}
