/* minigrad's CPU thread pool: runs a list of kernel launches, each split into parts, on persistent threads.

   Input: an array of launches (a kernel's entry point, its buffer addresses, the size of its outermost loop and
   how many parts to cut that loop into). Output: the kernels have run, in order; a launch starts once every
   part of the one before it is done (a kernel may read what the previous one wrote).

   Every CPU kernel exports `void <name>_entry(void *const *bufs, int core_start, int core_end)` (see
   minigrad/codegen/c_renderer.py and llvm_renderer.py), so the pool calls any kernel the same way. The
   calling thread works too; `threads - 1` workers wait for work by spinning briefly, then sleep on a
   condition variable. Python calls in through ctypes (minigrad/runtime/cpu_pool.py), which releases the GIL,
   so one call runs a whole captured training step without going back to Python between kernels.

   How parts are handed out: one 64-bit word `state` holds (batch number : 32 bits, launch : 32); the thread that
   finishes the last part of a launch moves it on to the next launch. Each part of the batch has a claim flag, set
   with a compare-and-swap by the thread that runs it. Thread t first takes the parts of its own share of each
   launch's outer loop ([t/T, (t+1)/T) of it, in order), then what is left of the other shares, from their ends.
   Consecutive kernels that cut the same data the same way so find their inputs in the cache of the core that
   wrote them, and a slow thread's parts are still taken by the others. A new batch starts only once every thread
   has left the last one (`active`), so nobody reads the launches and flags while they are rewritten. The
   launches are copied into memory the pool owns: the caller's list may be freed once the call returns.

   Where the threads run (Linux): a worker woken from its sleep is often put on the CPU of the thread that woke
   it, the caller, and both then share that one core for many batches while the other idles (a 64 MB row sum
   ran at 20-30 GB/s instead of 35-40 after a pause). So each batch notes the caller's CPU, and worker t keeps to
   the t-th allowed CPU after it: pinned there in its first batch, and again whenever it finds itself on the
   caller's CPU (the caller, never pinned, moved). With fewer CPUs than threads the workers are left unpinned.

   Submitting without waiting (`mg_pool_submit`): the workers run the batch while the caller goes on (in Python,
   building the next graph); the caller joins it in `mg_pool_wait`, taking the parts still free, and every other
   entry point (mg_pool_run, mg_pool_submit, a fork) waits for it first, so batches still run one after another.
   The caller must not touch the batch's memory before that wait (minigrad/runtime/cpu_pool.py keeps track).

   Timing (PROFILE=1, minigrad/viz/trace.py): given an array of `mg_part_time`, one per part of the list, each part's
   thread notes which thread ran it and when (CLOCK_MONOTONIC, `mg_pool_now_ns`) into its own slot, so no two threads
   write the same memory; Python reads the array once the call returns. Without one (NULL) nothing is timed: the
   pointer is read once per batch and tested once per part. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* sched_getcpu, pthread_setaffinity_np */
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

typedef void (*entry_fn)(void *const *bufs, int core_start, int core_end);

typedef struct {
  entry_fn fn;
  void *const *bufs;
  int32_t outer;   /* iterations of the kernel's outermost loop (core_end of the whole launch) */
  int32_t parts;   /* contiguous pieces of that loop the threads take in turn (>= 1) */
} mg_launch;

/* When and where one part ran (PROFILE=1): slot part_ends[launch - 1] + part of the array given to mg_pool_run. */
typedef struct {
  int32_t launch, part, parts;   /* part `part` of `parts` of the launch-th launch of the list */
  int32_t thread;                /* 0: the caller of mg_pool_run; 1..: the pool's workers */
  int32_t loop_start, loop_end;  /* the iterations of the outer loop it ran */
  int64_t start_ns, end_ns;      /* CLOCK_MONOTONIC (mg_pool_now_ns); end_ns is 0 in a slot no part used */
} mg_part_time;

#define MAX_LAUNCHES 4096        /* per call; the Python side cuts longer lists */
#define MAX_WORKERS 255
#define SPIN_NANOSECONDS 300000  /* an idle worker spins this long for the next batch, then sleeps */
#define YIELD_EVERY 4096         /* a thread waiting for a part held by a preempted thread gives its core away */

static mg_launch launches[MAX_LAUNCHES];
static int32_t part_ends[MAX_LAUNCHES];   /* parts finished in the batch once launch i is done (a running sum) */
static _Atomic int32_t launch_count;
static _Atomic uint64_t state;
static _Atomic int64_t finished;          /* parts finished in this batch */
static _Atomic uint32_t batch;            /* the batch number workers wake up for */
static _Atomic int active;                /* threads inside work_on */
static _Atomic unsigned char *claimed;    /* claimed[part_ends[i - 1] + j]: part j of launch i is taken */
static int64_t claim_slots;
static mg_part_time *_Atomic part_times;  /* this batch's timing slots, or NULL: not timed */
static _Thread_local int thread_id;       /* 0: the caller; workers 1..threads-1 */
static _Atomic int sleepers;
static int started, wanted;
static pthread_t threads[MAX_WORKERS];
static pthread_mutex_t sleep_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake_up = PTHREAD_COND_INITIALIZER;
static _Atomic int busy;                  /* a batch is published and not yet over: one batch at a time */
static _Atomic int64_t submitted = -1;    /* the batch mg_pool_submit published and nobody joined yet, else -1 */
static _Atomic int32_t submitted_count;   /* its number of launches */
static _Atomic int64_t last_submitted = -1, last_joined = -1;   /* so a second waiter waits for the first one's join */
#ifdef __linux__
static _Atomic int caller_cpu = -1;       /* the CPU the caller of this batch runs on (-1: unknown) */
static int allowed_cpus[CPU_SETSIZE], allowed_count;   /* the CPUs the process may use, in order */

static void note_the_callers_cpu(void) { atomic_store_explicit(&caller_cpu, sched_getcpu(), memory_order_relaxed); }

static void read_allowed_cpus(void) {
  cpu_set_t set;
  allowed_count = 0;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return;
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) if (CPU_ISSET(cpu, &set)) allowed_cpus[allowed_count++] = cpu;
}

/* Worker t pins itself to the t-th allowed CPU after the caller's, in its first batch and whenever it is on the
   caller's CPU (when there are enough CPUs to go round). */
static void leave_the_callers_cpu(int t) {
  static _Thread_local int pinned;
  int caller = atomic_load_explicit(&caller_cpu, memory_order_relaxed);
  if (caller < 0 || t >= allowed_count || (pinned && sched_getcpu() != caller)) return;
  pinned = 1;
  int position = 0;
  while (position < allowed_count && allowed_cpus[position] != caller) position++;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(allowed_cpus[(position + t) % allowed_count], &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}
#else
static void read_allowed_cpus(void) {}
static void note_the_callers_cpu(void) {}
static void leave_the_callers_cpu(int t) { (void)t; }
#endif

#define STATE(b, l) (((uint64_t)(b) << 32) | (uint64_t)(l))
#define STATE_BATCH(s) ((uint32_t)((s) >> 32))
#define STATE_LAUNCH(s) ((int32_t)((s) & 0x7fffffff))
#define CLOSED 0x7fffffff   /* the launch number of a batch whose launches are being copied in */

static int take(int64_t slot) {
  unsigned char free_ = 0;
  return atomic_load_explicit(&claimed[slot], memory_order_relaxed) == 0 && atomic_compare_exchange_strong(&claimed[slot], &free_, 1);
}

/* The next part of launch i this thread should run (see the top of the file), or -1 when all are taken. */
static int32_t claim_part(int32_t i, int32_t t, int32_t threads) {
  int64_t first = i ? part_ends[i - 1] : 0;
  int32_t parts = launches[i].parts;
  for (int32_t k = 0; k < threads; k++) {
    int32_t u = (t + k) % threads, start = (int32_t)((int64_t)parts * u / threads), end = (int32_t)((int64_t)parts * (u + 1) / threads);
    if (k == 0) { for (int32_t j = start; j < end; j++) if (take(first + j)) return j; }
    else for (int32_t j = end - 1; j >= start; j--) if (take(first + j)) return j;
  }
  return -1;
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The clock of mg_part_time, for Python to measure its offset from time.perf_counter_ns once. */
int64_t mg_pool_now_ns(void) { return now_ns(); }

/* Run iterations [start, end) of launch `l` (the `launch`-th of its list), timed into `slot` when it is not NULL. */
static void run_part(const mg_launch *l, int32_t start, int32_t end, mg_part_time *slot, int32_t launch, int32_t part, int32_t t) {
  if (slot == NULL) { l->fn(l->bufs, start, end); return; }
  int64_t began = now_ns();
  l->fn(l->bufs, start, end);
  *slot = (mg_part_time){launch, part, l->parts, t, start, end, began, now_ns()};
}

/* Take and run parts of batch `b` until all its launches are done. */
static void work_on(uint32_t b) {
  atomic_fetch_add(&active, 1);   /* before reading `state`: a new batch waits for this thread to leave */
  int32_t n = atomic_load(&launch_count), threads = wanted + 1, t = thread_id < threads ? thread_id : 0;
  /* read once: batch b's caller stored it before publishing b, and a later batch rewrites it only once this thread
     has left (active); if that later batch's pointer is read here, the state check below sees the new batch and stops */
  mg_part_time *times = atomic_load(&part_times);
  if (t > 0) leave_the_callers_cpu(t);
  unsigned waited = 0;
  for (;;) {
    uint64_t s = atomic_load(&state);
    int32_t i = STATE_LAUNCH(s);
    if (STATE_BATCH(s) != b || i >= n) break;
    int32_t part = claim_part(i, t, threads);
    if (part < 0) {   /* every part of launch i is taken: wait for the others to finish theirs */
      cpu_relax();
      if (++waited % YIELD_EVERY == 0) sched_yield();
      continue;
    }
    const mg_launch *l = &launches[i];
    int32_t start = (int32_t)((int64_t)l->outer * part / l->parts), end = (int32_t)((int64_t)l->outer * (part + 1) / l->parts);
    run_part(l, start, end, times ? &times[(i ? part_ends[i - 1] : 0) + part] : NULL, i, part, t);
    if (atomic_fetch_add(&finished, 1) + 1 == part_ends[i]) atomic_store(&state, STATE(b, i + 1));
  }
  atomic_fetch_sub(&active, 1);
}

static void *worker(void *id) {
  thread_id = (int)(intptr_t)id;
  uint32_t seen = atomic_load(&batch);
  for (;;) {
    uint32_t b;
    int64_t spin_until = now_ns() + SPIN_NANOSECONDS;
    for (unsigned spins = 1; (b = atomic_load(&batch)) == seen; spins++) {
      cpu_relax();
      if (spins % 64 == 0 && now_ns() > spin_until) break;
    }
    if (b == seen) {   /* sleep until the next batch; the caller wakes sleepers after publishing one */
      pthread_mutex_lock(&sleep_lock);
      atomic_fetch_add(&sleepers, 1);
      while ((b = atomic_load(&batch)) == seen) pthread_cond_wait(&wake_up, &sleep_lock);
      atomic_fetch_sub(&sleepers, 1);
      pthread_mutex_unlock(&sleep_lock);
    }
    seen = b;
    work_on(b);
  }
  return NULL;
}

void mg_pool_wait(void);

static void forget_threads_after_fork(void) {
  /* only the forking thread exists in the child: start new workers when it runs a batch */
  started = 0;
  pthread_mutex_init(&sleep_lock, NULL);
  pthread_cond_init(&wake_up, NULL);
  atomic_store(&busy, 0);
  atomic_store(&submitted, -1);
  atomic_store(&last_submitted, -1);
  atomic_store(&last_joined, -1);
  atomic_store(&sleepers, 0);
  atomic_store(&active, 0);
}

/* Use `threads` threads (the caller and threads - 1 workers). Returns the number of threads available. */
int mg_pool_threads(int threads) {
  static int registered;
  if (!registered) { pthread_atfork(mg_pool_wait, NULL, forget_threads_after_fork); registered = 1; }
  if (threads < 1) threads = 1;
  if (threads > MAX_WORKERS + 1) threads = MAX_WORKERS + 1;
  wanted = threads - 1;
  return wanted + 1;
}

static void start_workers(void) {
  if (started < wanted) read_allowed_cpus();   /* the workers start with the caller's affinity */
  while (started < wanted) {
    if (pthread_create(&threads[started], NULL, worker, (void *)(intptr_t)(started + 1)) != 0) { wanted = started; break; }
    pthread_detach(threads[started]);
    started++;
  }
}

/* The caller runs each launch whole (timed as its part 0, in the slot where its parts begin). */
static void run_alone(const mg_launch *list, int n, mg_part_time *times) {
  int64_t first = 0;
  for (int i = 0; i < n; i++) {
    mg_launch whole = list[i];
    whole.parts = 1;
    run_part(&whole, 0, whole.outer, times ? &times[first] : NULL, i, 0, 0);
    first += list[i].parts < 1 ? 1 : list[i].parts > 0xffff ? 0xffff : list[i].parts;
  }
}

static int take_the_pool(void) { int idle = 0; return atomic_compare_exchange_strong(&busy, &idle, 1); }

/* Publish launches `list` as a new batch for the workers (this thread holds `busy`). Returns its number, or -1 when
   the claim flags can't grow (nothing was published; `busy` is released). */
static int64_t publish(const mg_launch *list, int n, mg_part_time *times) {
  start_workers();
  uint32_t b = atomic_load(&batch) + 1;
  atomic_store(&state, STATE(b, CLOSED));   /* workers still in the last batch leave it; none can enter this one */
  for (unsigned waited = 1; atomic_load(&active) > 0; waited++) {
    cpu_relax();
    if (waited % YIELD_EVERY == 0) sched_yield();
  }
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    launches[i] = list[i];
    if (launches[i].parts < 1) launches[i].parts = 1;
    if (launches[i].parts > 0xffff) launches[i].parts = 0xffff;
    total += launches[i].parts;
    part_ends[i] = (int32_t)total;
  }
  if (total > claim_slots) {
    _Atomic unsigned char *grown = malloc((size_t)total);
    if (grown == NULL) { atomic_store(&busy, 0); return -1; }
    free((void *)claimed);
    claimed = grown;
    claim_slots = total;
  }
  for (int64_t j = 0; j < total; j++) atomic_store_explicit(&claimed[j], 0, memory_order_relaxed);
  atomic_store(&launch_count, n);
  atomic_store(&finished, 0);
  atomic_store(&part_times, times);
  note_the_callers_cpu();
  atomic_store(&state, STATE(b, 0));
  atomic_store(&batch, b);
  if (atomic_load(&sleepers) > 0) {
    pthread_mutex_lock(&sleep_lock);
    pthread_cond_broadcast(&wake_up);
    pthread_mutex_unlock(&sleep_lock);
  }
  return b;
}

/* Work on batch `b` of `n` launches until it is over, then let the next batch in (noting first that a submitted
   batch was joined). */
static void join(uint32_t b, int32_t n, int was_submitted) {
  work_on(b);
  unsigned waited = 0;
  while (STATE_LAUNCH(atomic_load(&state)) < n) {   /* the last parts may still run on other threads */
    cpu_relax();
    if (++waited % YIELD_EVERY == 0) sched_yield();
  }
  if (was_submitted) atomic_store(&last_joined, b);
  atomic_store(&busy, 0);
}

/* Return once the batch of the last mg_pool_submit is over (this thread helps to finish it). */
void mg_pool_wait(void) {
  for (unsigned waited = 1;; waited++) {
    int64_t b = atomic_exchange(&submitted, -1);
    if (b >= 0) { join((uint32_t)b, atomic_load(&submitted_count), 1); return; }
    /* none to take; but another thread may be joining it right now, and its memory is not free before that's over */
    if (atomic_load(&last_joined) == atomic_load(&last_submitted)) return;
    cpu_relax();
    if (waited % YIELD_EVERY == 0) sched_yield();
  }
}

/* Run `n` launches in order, timing each part into `times` (one slot per part, parts clamped to 1..65535) unless it
   is NULL. Returns 0, or -1 if n is out of range (nothing runs). */
int mg_pool_run(const mg_launch *list, int n, mg_part_time *times) {
  if (n < 0 || n > MAX_LAUNCHES) return -1;
  mg_pool_wait();
  int split = 0;
  for (int i = 0; i < n; i++) split |= list[i].parts > 1;
  /* one part each, no workers, or another thread's batch running: this thread runs them all, whole */
  int64_t b;
  if (!split || wanted == 0 || !take_the_pool() || (b = publish(list, n, times)) < 0) { run_alone(list, n, times); return 0; }
  join((uint32_t)b, n, 0);
  return 0;
}

/* Start `n` launches on the workers and return without waiting for them: 1, and mg_pool_wait must come before the
   caller touches their memory; or 0 when they already ran here (no workers, or another thread's batch running);
   -1 if n is out of range (nothing runs). */
int mg_pool_submit(const mg_launch *list, int n) {
  if (n < 0 || n > MAX_LAUNCHES) return -1;
  mg_pool_wait();
  int64_t b;
  if (wanted == 0 || !take_the_pool() || (b = publish(list, n, NULL)) < 0) { run_alone(list, n, NULL); return 0; }
  atomic_store(&submitted_count, n);
  atomic_store(&last_submitted, b);
  atomic_store(&submitted, b);
  return 1;
}
