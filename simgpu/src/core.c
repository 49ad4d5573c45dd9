/* simgpu core: configuration, tracing, handles, initialisation, errors, devices,
 * contexts and the per-thread context stack. */
#include "sim.h"
#include <signal.h>

#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

sg_config sg_cfg;
pthread_mutex_t sg_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t sg_progress = PTHREAD_COND_INITIALIZER;
int sg_initialized;
volatile sig_atomic_t sg_forked_child;

static pthread_once_t config_once = PTHREAD_ONCE_INIT;

static long env_long(const char *name, long fallback, long lo, long hi) {
    const char *text = getenv(name);
    if (text == NULL || *text == '\0') return fallback;
    char *end = NULL;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < lo || value > hi) {
        fprintf(stderr, "simgpu: ignoring %s=%s (expected an integer in [%ld, %ld])\n", name, text,
                lo, hi);
        return fallback;
    }
    return value;
}

static void load_config_once(void) {
    sg_cfg.devices = (int)env_long("SIMGPU_DEVICES", 2, 0, 64);
    sg_cfg.delay_us = (unsigned)env_long("SIMGPU_DELAY_US", 0, 0, 10000000);
    sg_cfg.trace = (int)env_long("SIMGPU_TRACE", 0, 0, 2);
    sg_cfg.device_bytes = (size_t)env_long("SIMGPU_MEMORY_MB", 8192, 16, 1 << 20) << 20;
    sg_cfg.driver_version = (int)env_long("SIMGPU_DRIVER_VERSION", 13000, 12000, 99999);
    sg_cfg.compute_capability = (int)env_long("SIMGPU_COMPUTE_CAPABILITY", 90, 90, 129);
    sg_check_mode = sg_check_mode_from_env(getenv("SIMGPU_CHECK"));
}

int sg_compute_capability(void) {
    sg_load_config();
    return __atomic_load_n(&sg_cfg.compute_capability, __ATOMIC_RELAXED);
}

void sg_load_config(void) { pthread_once(&config_once, load_config_once); }

double sg_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- call counters and the trace ------------------------------------------------ */

#define MAX_APIS 1024
/* Entry point i's name, published once (release) under api_lock and read without it
 * (acquire) by every call: API_BEGIN caches its index in an atomic of its own, and a thread
 * that reads that index from another thread's first call must see the name it names. */
static _Atomic(const char *) api_names[MAX_APIS];
static atomic_llong api_calls[MAX_APIS];
static int api_count; /* under api_lock */
static pthread_mutex_t api_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *api_name_at(int i) {
    return atomic_load_explicit(&api_names[i], memory_order_acquire);
}

int sg_api_index(const char *name) {
    pthread_mutex_lock(&api_lock);
    int found = -1;
    for (int i = 0; i < api_count; i++) {
        if (strcmp(api_name_at(i), name) == 0) {
            found = i;
            break;
        }
    }
    if (found < 0 && api_count < MAX_APIS) {
        found = api_count++;
        atomic_store_explicit(&api_names[found], name, memory_order_release);
    }
    pthread_mutex_unlock(&api_lock);
    return found < 0 ? MAX_APIS - 1 : found;
}

/* Injected failures (simgpu_fail): process-wide rules, one per entry-point name.  A rule
 * lets its entry point's next `skip` calls run, then answers the following `count` calls
 * (count < 0: every call until cleared) with `code` without running them.  A rule named
 * "cuFoo" applies to cuFoo and to its versioned variants (cuFoo_v2, cuFoo_v3, ...); the
 * per-thread-default-stream variants (_ptsz, _ptds) run their base entry point, so every
 * route to an entry point (the exported symbol, any pointer cuGetProcAddress hands out)
 * meets the same rule.  Rules are checked where calls are counted (sg_api_enter), so an
 * injected failure is counted as a call, and traced. */
#define MAX_FAULTS 32
typedef struct {
    char name[128];
    int active;
    CUresult code;
    long long skip;   /* calls still to let through */
    long long count;  /* failures still to inject; < 0: until cleared */
    long long fired;  /* failures injected so far */
} fault_rule;
static fault_rule faults[MAX_FAULTS];
static atomic_int faults_active; /* rules set: the fast path checks only this */
static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER; /* the call log (below) */

/* A child forked after the parent initialised the driver cannot use it: its calls answer
 * CUDA_ERROR_NOT_INITIALIZED, cuInit included, and return at once, but for those naming a
 * stream or an event, which succeed doing nothing (sim.h: API_FORKED_CHILD_SUCCEEDS; both as
 * driver 580 did on an H200).  The parent's stream workers do not exist in the child, so a
 * wait would never end; the locks may have been held by a thread of the parent at the
 * fork, so the handler gives the child fresh ones (the child's only thread is the one that
 * forked). */
static void forked_child(void) {
    if (sg_initialized) sg_forked_child = 1;
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    sg_lock = fresh;
    api_lock = fresh;
    fault_lock = fresh;
    log_lock = fresh;
}

__attribute__((constructor)) static void register_fork_handler(void) {
    pthread_atfork(NULL, NULL, forked_child);
}

/* "cuFoo" names cuFoo and cuFoo_v<digits>. */
static int fault_matches(const char *rule, const char *entry) {
    size_t n = strlen(rule);
    if (strncmp(rule, entry, n) != 0) return 0;
    const char *rest = entry + n;
    if (*rest == '\0') return 1;
    if (rest[0] != '_' || rest[1] != 'v' || rest[2] == '\0') return 0;
    for (rest += 2; *rest; rest++)
        if (*rest < '0' || *rest > '9') return 0;
    return 1;
}

static __thread int tls_api_index = -1; /* the entry point this thread is in (sg_api_name) */
static __thread long tls_log_slot = -1;  /* the call log: this thread's call in flight, at that slot */
static __thread int tls_log_injected;    /* ... which an injected failure answers */

const char *sg_api_name(void) {
    const char *name = tls_api_index >= 0 ? api_name_at(tls_api_index) : NULL;
    return name != NULL ? name : "a driver call";
}

int sg_api_enter(int index, CUresult *fault) {
    tls_api_index = index;
    sg_load_config();
    atomic_fetch_add(&api_calls[index], 1);
    if (atomic_load(&faults_active) == 0) return 0;
    const char *name = api_name_at(index);
    if (name == NULL) return 0;
    int hit = 0;
    pthread_mutex_lock(&fault_lock);
    for (int i = 0; i < MAX_FAULTS; i++) {
        fault_rule *f = &faults[i];
        if (!f->active || !fault_matches(f->name, name)) continue;
        if (f->skip > 0) {
            f->skip--;
        } else if (f->count != 0) {
            if (f->count > 0) f->count--;
            f->fired++;
            *fault = f->code;
            hit = 1;
            if (tls_log_slot >= 0) tls_log_injected = 1;
        }
        break;
    }
    pthread_mutex_unlock(&fault_lock);
    return hit;
}

/* Exported for tests: the next `skip` calls of `entry_point` (and of its _vN variants)
 * run as usual, then the following `count` calls return `result_code` without doing
 * anything (count -1: every call until cleared; count 0: removes the rule).  Replaces an
 * earlier rule for the same name.  Process-wide: calls from every thread count.
 * Returns 0, or -1 when the name is empty or too long or the rule table is full. */
SG_API int simgpu_fail(const char *entry_point, int result_code, int count, int skip) {
    if (entry_point == NULL || *entry_point == '\0' || strlen(entry_point) >= sizeof faults[0].name ||
        skip < 0)
        return -1;
    int rc = -1, live = 0;
    pthread_mutex_lock(&fault_lock);
    fault_rule *slot = NULL;
    for (int i = 0; i < MAX_FAULTS && slot == NULL; i++)
        if (faults[i].active && strcmp(faults[i].name, entry_point) == 0) slot = &faults[i];
    for (int i = 0; i < MAX_FAULTS && slot == NULL; i++)
        if (!faults[i].active) slot = &faults[i];
    if (slot != NULL) {
        if (count == 0) {
            slot->active = 0;
        } else {
            strcpy(slot->name, entry_point);
            slot->code = result_code;
            slot->skip = skip;
            slot->count = count < 0 ? -1 : count;
            slot->fired = 0;
            slot->active = 1;
        }
        rc = 0;
    }
    for (int i = 0; i < MAX_FAULTS; i++) live += faults[i].active;
    atomic_store(&faults_active, live);
    pthread_mutex_unlock(&fault_lock);
    return rc;
}

/* Exported for tests: removes every injected-failure rule. */
SG_API void simgpu_fail_clear(void) {
    pthread_mutex_lock(&fault_lock);
    memset(faults, 0, sizeof faults);
    atomic_store(&faults_active, 0);
    pthread_mutex_unlock(&fault_lock);
}

/* Exported for tests: how many failures the rule named `entry_point` has injected since
 * it was set (-1: no such rule). */
SG_API long long simgpu_fail_fired(const char *entry_point) {
    long long fired = -1;
    if (entry_point == NULL) return -1;
    pthread_mutex_lock(&fault_lock);
    for (int i = 0; i < MAX_FAULTS; i++)
        if (faults[i].active && strcmp(faults[i].name, entry_point) == 0) fired = faults[i].fired;
    pthread_mutex_unlock(&fault_lock);
    return fired;
}

/* ---- the call log ------------------------------------------------------------------
 * simgpu_call_log_start(scope) records, from empty, every call of an entry point counted by
 * API_BEGIN (scope 0: made by the OS thread that started it; 1: by any thread), in the order
 * the calls began, until simgpu_call_log_stop; the first SG_CALL_LOG_CAP calls are kept, the
 * later ones only counted (simgpu_call_log_dropped).  A call's entry is made as it begins (its
 * arguments, before any injected failure answers it) and completed as it returns (its result,
 * its out-values).  Everything is under log_lock, taken only while recording: a call that
 * started before a restart completes nothing of the new log (entries carry the log's
 * generation). */
#define SG_CALL_LOG_CAP 100000
typedef struct {
    uint64_t seq;     /* the call's place in the log: 0, 1, ... in the order calls began */
    const char *name; /* the entry point (the base one for a per-thread-default-stream variant) */
    int64_t thread;   /* the OS thread id (gettid: Python's threading.get_native_id()) */
    int32_t result;   /* the CUresult; -1 while the call has not returned */
    int32_t nargs;    /* values in args */
    uint32_t flags;   /* SIMGPU_CALL_* below */
    uint32_t reserved;
    uint64_t args[6];
} simgpu_call_record;
enum { SIMGPU_CALL_RETURNED = 1, SIMGPU_CALL_PER_THREAD = 2, SIMGPU_CALL_INJECTED = 4 };
_Static_assert(sizeof(simgpu_call_record) == 88, "call record layout");

atomic_int sg_call_log_on;
static simgpu_call_record *log_entries; /* SG_CALL_LOG_CAP of them, allocated at the first start */
static long log_count, log_dropped;
static int log_scope;
static int64_t log_owner;  /* the thread that started a scope-0 log */
static uint64_t log_gen;   /* bumped by every start */
static __thread uint64_t tls_log_gen;
static __thread unsigned tls_log_outs;
static __thread uint64_t tls_log_out_ptrs[6];
static __thread int64_t tls_tid;

int sg_ptds_active(void); /* stream.c: the call came through a per-thread-default-stream variant */

static int64_t log_thread_id(void) {
    if (tls_tid == 0) tls_tid = (int64_t)syscall(SYS_gettid);
    return tls_tid;
}

void sg_call_log_begin(int index, unsigned outs, const uint64_t *args, int nargs) {
    int64_t tid = log_thread_id();
    pthread_mutex_lock(&log_lock);
    if (atomic_load_explicit(&sg_call_log_on, memory_order_relaxed) && (log_scope == 1 || tid == log_owner)) {
        if (log_count >= SG_CALL_LOG_CAP) {
            log_dropped++;
        } else {
            simgpu_call_record *e = &log_entries[log_count];
            memset(e, 0, sizeof *e);
            e->seq = (uint64_t)log_count;
            e->name = api_name_at(index);
            e->thread = tid;
            e->result = -1;
            e->nargs = nargs > 6 ? 6 : nargs;
            e->flags = sg_ptds_active() ? SIMGPU_CALL_PER_THREAD : 0;
            tls_log_outs = 0;
            for (int i = 0; i < e->nargs; i++) {
                unsigned kind = (outs >> (2 * i)) & 3u;
                if (kind != 0) {
                    tls_log_outs |= kind << (2 * i);
                    tls_log_out_ptrs[i] = args[i];
                } else {
                    e->args[i] = args[i];
                }
            }
            tls_log_slot = log_count++;
            tls_log_gen = log_gen;
        }
    }
    pthread_mutex_unlock(&log_lock);
}

/* The call in flight on this thread returns `result` (any mode; nothing when not logged). */
static void call_log_end(CUresult result) {
    long slot = tls_log_slot;
    int injected = tls_log_injected;
    tls_log_slot = -1;
    tls_log_injected = 0;
    uint64_t outv[6] = {0};
    if (result == CUDA_SUCCESS) {
        for (int i = 0; i < 6; i++) {
            unsigned kind = (tls_log_outs >> (2 * i)) & 3u;
            const void *p = (const void *)(uintptr_t)tls_log_out_ptrs[i];
            if (kind == 0 || p == NULL) continue;
            if (kind == 1) {
                uint32_t v;
                memcpy(&v, p, sizeof v);
                outv[i] = v;
            } else {
                memcpy(&outv[i], p, sizeof outv[i]);
            }
        }
    }
    pthread_mutex_lock(&log_lock);
    if (log_gen == tls_log_gen && slot < log_count) {
        simgpu_call_record *e = &log_entries[slot];
        e->result = result;
        e->flags |= SIMGPU_CALL_RETURNED | (injected ? SIMGPU_CALL_INJECTED : 0);
        for (int i = 0; i < e->nargs; i++)
            if ((tls_log_outs >> (2 * i)) & 3u) e->args[i] = outv[i];
    }
    pthread_mutex_unlock(&log_lock);
}

/* Exported for tests: starts the call log from empty.  scope 0: only the calls the calling OS
 * thread makes; 1: every thread's.  0, or -1 for another scope (or no memory for the log). */
SG_API int simgpu_call_log_start(int scope) {
    if (scope != 0 && scope != 1) return -1;
    pthread_mutex_lock(&log_lock);
    if (log_entries == NULL) log_entries = malloc(SG_CALL_LOG_CAP * sizeof *log_entries);
    int rc = -1;
    if (log_entries != NULL) {
        log_gen++;
        log_count = 0;
        log_dropped = 0;
        log_scope = scope;
        log_owner = log_thread_id();
        atomic_store_explicit(&sg_call_log_on, 1, memory_order_relaxed);
        rc = 0;
    }
    pthread_mutex_unlock(&log_lock);
    return rc;
}

/* Exported for tests: no further call is logged (calls in flight still complete their entry);
 * the log stays readable until the next start. */
SG_API void simgpu_call_log_stop(void) {
    pthread_mutex_lock(&log_lock);
    atomic_store_explicit(&sg_call_log_on, 0, memory_order_relaxed);
    pthread_mutex_unlock(&log_lock);
}

/* Exported for tests: the calls logged (at most SG_CALL_LOG_CAP). */
SG_API long simgpu_call_log_count(void) {
    pthread_mutex_lock(&log_lock);
    long n = log_count;
    pthread_mutex_unlock(&log_lock);
    return n;
}

/* Exported for tests: the calls made while recording, once the log was full (not logged). */
SG_API long simgpu_call_log_dropped(void) {
    pthread_mutex_lock(&log_lock);
    long n = log_dropped;
    pthread_mutex_unlock(&log_lock);
    return n;
}

/* Exported for tests: copies entry i (0-based, in call order) into *out: 0, or -1 when there
 * is no such entry. */
SG_API int simgpu_call_log_get(long i, simgpu_call_record *out) {
    int rc = -1;
    pthread_mutex_lock(&log_lock);
    if (out != NULL && i >= 0 && i < log_count) {
        *out = log_entries[i];
        rc = 0;
    }
    pthread_mutex_unlock(&log_lock);
    return rc;
}

SG_API CUresult cuGetErrorName(CUresult error, const char **name);

CUresult sg_api_leave(int index, CUresult result) {
    /* Every entry point returns through here holding no lock: the user-object destructors
     * the call made due run now, in the calling thread, before it returns (graph.c). */
    if (__builtin_expect(tls_log_slot >= 0, 0)) call_log_end(result);
    sg_user_objects_run_due();
    if (sg_cfg.trace) {
        const char *name = NULL;
        if (cuGetErrorName(result, &name) != CUDA_SUCCESS) name = "?";
        fprintf(stderr, "simgpu[%ld]: %s -> %d %s\n", (long)syscall(SYS_gettid),
                api_name_at(index) ? api_name_at(index) : "?", result, name);
    }
    return result;
}

#define MAX_COUNTERS 64
static struct {
    const char *name;
    atomic_llong value;
} counters[MAX_COUNTERS];
static int counter_count;

void sg_count(const char *counter, long long delta) {
    int found = -1;
    pthread_mutex_lock(&api_lock);
    for (int i = 0; i < counter_count; i++) {
        if (strcmp(counters[i].name, counter) == 0) {
            found = i;
            break;
        }
    }
    if (found < 0 && counter_count < MAX_COUNTERS) {
        found = counter_count++;
        counters[found].name = counter;
    }
    pthread_mutex_unlock(&api_lock);
    if (found >= 0) atomic_fetch_add(&counters[found].value, delta);
}

/* Exported for tests (ctypes): how many times an entry point was called. */
SG_API long long simgpu_call_count(const char *name) {
    long long total = 0;
    pthread_mutex_lock(&api_lock);
    for (int i = 0; i < api_count; i++)
        if (strcmp(api_name_at(i), name) == 0) total += atomic_load(&api_calls[i]);
    pthread_mutex_unlock(&api_lock);
    return total;
}

/* Exported for tests: sets every entry point's call count back to 0. */
SG_API void simgpu_calls_reset(void) {
    pthread_mutex_lock(&api_lock);
    for (int i = 0; i < api_count; i++) atomic_store(&api_calls[i], 0);
    pthread_mutex_unlock(&api_lock);
}

/* Exported for tests: a named counter (events_created, events_destroyed, events_live,
 * streams_created, streams_destroyed, streams_live, allocations_live, launches,
 * host_waits, ...); 0 for a name never counted. */
SG_API long long simgpu_counter(const char *name) {
    long long value = 0;
    pthread_mutex_lock(&api_lock);
    for (int i = 0; i < counter_count; i++)
        if (strcmp(counters[i].name, name) == 0) value = atomic_load(&counters[i].value);
    pthread_mutex_unlock(&api_lock);
    return value;
}

/* Exported for tests: changes SIMGPU_DELAY_US for the operations streams start from now on. */
SG_API void simgpu_set_delay_us(unsigned int microseconds) {
    sg_load_config();
    __atomic_store_n(&sg_cfg.delay_us, microseconds, __ATOMIC_RELAXED);
}

/* Exported for tests: changes SIMGPU_COMPUTE_CAPABILITY (every device's) from now on; 0, or -1
 * (nothing changed) for a capability outside 9.0 to 12.9. */
SG_API int simgpu_set_compute_capability(int major, int minor) {
    if (major < 9 || major > 12 || minor < 0 || minor > 9) return -1;
    sg_load_config();
    __atomic_store_n(&sg_cfg.compute_capability, major * 10 + minor, __ATOMIC_RELAXED);
    return 0;
}

/* Exported for tests: 1, so a test can tell the simulator from a real driver. */
SG_API int simgpu_is_simulator(void) { return 1; }

/* Exported for tests: the entry points called so far, one "name count" per line. */
SG_API size_t simgpu_calls_report(char *buffer, size_t capacity) {
    size_t used = 0;
    pthread_mutex_lock(&api_lock);
    for (int i = 0; i < api_count; i++) {
        long long n = atomic_load(&api_calls[i]);
        if (n == 0) continue;
        int w = snprintf(buffer ? buffer + used : NULL, buffer && used < capacity ? capacity - used : 0,
                         "%s %lld\n", api_name_at(i), n);
        if (w > 0) used += (size_t)w;
    }
    pthread_mutex_unlock(&api_lock);
    return used;
}

/* ---- handles ---------------------------------------------------------------------- */

typedef struct {
    uint64_t key; /* 0: empty, 1: removed */
    void *obj;
} slot_t;
static slot_t *table;
static size_t table_cap, table_used; /* used counts removed slots too */
static uint64_t next_handle = 0x100000000000ULL;

static size_t hash64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k;
}

static void table_put(uint64_t key, void *obj) {
    size_t mask = table_cap - 1, i = hash64(key) & mask;
    while (table[i].key > 1) i = (i + 1) & mask;
    if (table[i].key == 0) table_used++;
    table[i].key = key;
    table[i].obj = obj;
}

static void table_grow(void) {
    slot_t *old = table;
    size_t old_cap = table_cap, live = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key > 1) live++;
    size_t cap = 1024;
    while (cap < live * 4) cap *= 2;
    table = calloc(cap, sizeof(slot_t));
    if (table == NULL) {
        fprintf(stderr, "simgpu: out of host memory for the handle table\n");
        abort();
    }
    table_cap = cap;
    table_used = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key > 1) table_put(old[i].key, old[i].obj);
    free(old);
}

uint64_t sg_handle_new(void *obj, int kind) {
    if ((table_used + 1) * 2 > table_cap) table_grow();
    uint64_t h = next_handle;
    next_handle += 0x100;
    ((sg_obj *)obj)->h = h;
    ((sg_obj *)obj)->kind = kind;
    table_put(h, obj);
    return h;
}

static sg_obj *handle_find(uint64_t h) {
    if (h < 2 || table_cap == 0) return NULL;
    size_t mask = table_cap - 1, i = hash64(h) & mask;
    while (table[i].key != 0) {
        if (table[i].key == h) return table[i].obj;
        i = (i + 1) & mask;
    }
    return NULL;
}

void *sg_handle_get(uint64_t h, int kind) {
    sg_obj *o = handle_find(h);
    if (o == NULL || o->kind == K_GONE) return NULL;
    return (kind == 0 || o->kind == kind) ? o : NULL;
}

/* What a destroyed stream or event leaves behind, so that a later use can be answered
 * as a real driver answers it (sg_handle_gone).  Other kinds leave nothing. */
typedef struct {
    sg_obj o;
    int was;          /* K_STREAM or K_EVENT */
    int torn_down;    /* with its context (not cuStreamDestroy / cuEventDestroy) */
    int primary_dev;  /* torn down with this device's primary context; else -1 */
} sg_gone;

sg_ctx *sg_tearing_down = NULL;

void sg_handle_drop(uint64_t h) {
    if (table_cap == 0) return;
    size_t mask = table_cap - 1, i = hash64(h) & mask;
    while (table[i].key != 0) {
        if (table[i].key == h) {
            sg_obj *o = table[i].obj;
            sg_gone *g = NULL;
            if (o != NULL && (o->kind == K_STREAM || o->kind == K_EVENT)) g = calloc(1, sizeof *g);
            if (g == NULL) {
                table[i].key = 1;
                table[i].obj = NULL;
                return;
            }
            g->o.h = h;
            g->o.kind = K_GONE;
            g->was = o->kind;
            g->primary_dev = -1;
            if (o->kind == K_STREAM) {
                sg_stream *s = (sg_stream *)o;
                g->torn_down = s->torn_down;
                g->primary_dev = s->torn_down_dev;
            } else if (sg_tearing_down != NULL) {
                g->torn_down = 1;
                g->primary_dev = sg_tearing_down->primary ? sg_tearing_down->dev : -1;
            }
            table[i].obj = g;
            return;
        }
        i = (i + 1) & mask;
    }
}

static void gone_crash(const char *call, uint64_t h, const char *what) {
    fprintf(stderr,
            "simgpu: %s named %s 0x%llx: undefined in CUDA (a real driver dereferences the "
            "handle; driver 580 crashed with SIGSEGV), so the simulator ends the process the same way\n",
            call, what, (unsigned long long)h);
    fflush(stderr);
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
    abort();
}

/* Handles a test had the driver report gone (simgpu_handle_report_gone): each answers its
 * code, whatever the handle was; lock held. */
typedef struct {
    uint64_t h;
    CUresult code;
} reported_t;
static reported_t *reported;
static int nreported, cap_reported;

int sg_handle_reported(uint64_t h, CUresult *code) {
    for (int i = 0; i < nreported; i++) {
        if (reported[i].h == h) {
            *code = reported[i].code;
            return 1;
        }
    }
    return 0;
}

int sg_handle_report(uint64_t h, CUresult code) {
    for (int i = 0; i < nreported; i++) {
        if (reported[i].h == h) {
            reported[i].code = code;
            return 0;
        }
    }
    if (nreported == cap_reported) {
        int cap = cap_reported ? cap_reported * 2 : 16;
        reported_t *grown = realloc(reported, (size_t)cap * sizeof *grown);
        if (grown == NULL) return -1;
        reported = grown;
        cap_reported = cap;
    }
    reported[nreported].h = h;
    reported[nreported].code = code;
    nreported++;
    return 0;
}

int sg_handle_was(uint64_t h) {
    sg_obj *o = handle_find(h);
    if (o == NULL) return 0;
    return o->kind == K_GONE ? ((sg_gone *)o)->was : o->kind;
}

CUresult sg_handle_gone(uint64_t h, const char *call, CUresult otherwise) {
    CUresult code;
    if (nreported > 0 && sg_handle_reported(h, &code)) return code;
    sg_obj *o = handle_find(h);
    int was, torn_down, primary_dev;
    if (o != NULL && o->kind == K_STREAM && ((sg_stream *)o)->destroyed) {
        sg_stream *s = (sg_stream *)o; /* destroyed, its queued work still draining */
        was = K_STREAM, torn_down = s->torn_down, primary_dev = s->torn_down_dev;
    } else if (o != NULL && o->kind == K_GONE) {
        sg_gone *g = (sg_gone *)o;
        was = g->was, torn_down = g->torn_down, primary_dev = g->primary_dev;
    } else {
        return otherwise;
    }
    const char *what = was == K_STREAM ? "the destroyed stream" : "the destroyed event";
    if (!torn_down) {
        if (was == K_STREAM) gone_crash(call, h, what);
        return CUDA_ERROR_CONTEXT_IS_DESTROYED; /* an event: driver 580's answer */
    }
    if (primary_dev >= 0) {
        /* Its primary context was reset or released: in use again, the handle points
         * into freed state; not yet, the call finds no active context. */
        if (sg_primary(primary_dev)->active)
            gone_crash(call, h, was == K_STREAM ? "a stream of a reset primary context"
                                                : "an event of a reset primary context");
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    return otherwise; /* a destroyed (non-primary) context's: as before */
}

/* Calls fn on every live object of a kind (lock held; fn may drop handles). */
void sg_handle_each(int kind, void (*fn)(void *obj, void *arg), void *arg) {
    for (size_t i = 0; i < table_cap; i++) {
        if (table[i].key > 1 && ((sg_obj *)table[i].obj)->kind == kind) fn(table[i].obj, arg);
    }
}

/* ---- errors -------------------------------------------------------------------------- */

static const struct {
    CUresult code;
    const char *name;
    const char *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
     "peer access is already enabled"},
    {CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
     "peer access has not been enabled"},
    {CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
     "cannot set while device is active in this process"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED",
     "context is destroyed"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
     "capture was not ended in the same stream as it began"},
    {CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
     "capturing stream has unjoined work"},
    {CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
     "dependency created on uncaptured work in another stream"},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {CUDA_ERROR_CAPTURED_EVENT, "CUDA_ERROR_CAPTURED_EVENT",
     "operation not permitted on an event last recorded in a capturing stream"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {CUDA_ERROR_INVALID_CLUSTER_SIZE, "CUDA_ERROR_INVALID_CLUSTER_SIZE", "invalid cluster size"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

SG_API CUresult cuGetErrorName(CUresult error, const char **name) {
    if (name == NULL) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        if (errors[i].code == error) {
            *name = errors[i].name;
            return CUDA_SUCCESS;
        }
    }
    *name = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

SG_API CUresult cuGetErrorString(CUresult error, const char **text) {
    if (text == NULL) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        if (errors[i].code == error) {
            *text = errors[i].text;
            return CUDA_SUCCESS;
        }
    }
    *text = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---- initialisation and version -------------------------------------------------- */

static sg_ctx **primaries;

SG_API CUresult cuDriverGetVersion(int *version) {
    API_BEGIN_ARGS("cuDriverGetVersion", LOG_OUT32(0), LA(version));
    if (version == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    *version = sg_cfg.driver_version;
    API_RETURN(CUDA_SUCCESS);
}

/* The driver's private export tables (asked for by the CUDA runtime and by NVRTC, by UUID)
 * are undocumented: the simulator serves none, and answers every id "not found" with a NULL
 * table, as the driver answers an id it does not know.  Without the entry point at all,
 * NVRTC 13 calls through a NULL pointer at its first compile. */
SG_API CUresult cuGetExportTable(const void **table, const sg_uuid *id) {
    API_BEGIN_ARGS("cuGetExportTable", LOG_OUT64(0), LA(table), LA(id));
    if (table == NULL || id == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    *table = NULL;
    API_RETURN(CUDA_ERROR_NOT_FOUND);
}

static unsigned long long next_ctx_id = 1;

static sg_ctx *ctx_new(int dev, int primary) {
    sg_ctx *c = calloc(1, sizeof *c);
    if (c == NULL) return NULL;
    c->dev = dev;
    c->primary = primary;
    c->id = next_ctx_id++;
    c->limits[0] = 1024;             /* stack size */
    c->limits[1] = 1048576;          /* printf FIFO */
    c->limits[2] = 8388608;          /* malloc heap */
    c->limits[3] = 2;                /* device runtime sync depth */
    c->limits[4] = 2048;             /* device runtime pending launches */
    c->limits[5] = 64;               /* L2 fetch granularity */
    sg_handle_new(c, K_CTX);
    return c;
}

/* Makes a context usable: its legacy default stream exists. */
static void ctx_activate(sg_ctx *c) {
    if (c->active) return;
    /* Back after a reset or a release to 0: the same handle, a new cuCtxGetId (driver 580
     * answered 1, then 2 after cuDevicePrimaryCtxReset and a retain). */
    if (c->generation > 0) c->id = next_ctx_id++;
    c->legacy = sg_stream_create(c, SK_LEGACY, 0, 0);
    c->active = 1;
}

SG_API CUresult cuInit(unsigned int flags) {
    API_BEGIN_ARGS("cuInit", 0, LA(flags));
    if (sg_forked_child) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    if (flags != 0) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    if (!sg_initialized) {
        if (sg_cfg.devices == 0) {
            pthread_mutex_unlock(&sg_lock);
            API_RETURN(CUDA_ERROR_NO_DEVICE);
        }
        sg_memory_init();
        primaries = calloc((size_t)sg_cfg.devices, sizeof *primaries);
        for (int d = 0; d < sg_cfg.devices; d++) primaries[d] = ctx_new(d, 1);
        sg_initialized = 1;
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(CUDA_SUCCESS);
}

/* ---- devices ------------------------------------------------------------------------- */

int sg_device_valid(int dev) { return dev >= 0 && dev < sg_cfg.devices; }
sg_ctx *sg_primary(int dev) { return primaries[dev]; }

SG_API CUresult cuDeviceGetCount(int *count) {
    API_BEGIN_ARGS("cuDeviceGetCount", LOG_OUT32(0), LA(count));
    API_NEED_INIT();
    if (count == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    *count = sg_cfg.devices;
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    API_BEGIN_ARGS("cuDeviceGet", LOG_OUT32(0), LA(device), LA(ordinal));
    API_NEED_INIT();
    if (device == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!sg_device_valid(ordinal)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    *device = ordinal;
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    API_BEGIN_ARGS("cuDeviceGetName", 0, LA(name), LA(len), LA(dev));
    API_NEED_INIT();
    if (name == NULL || len <= 0) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!sg_device_valid(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    snprintf(name, (size_t)len, "SimGPU %d (simulated, sm_%d)", dev, sg_compute_capability());
    API_RETURN(CUDA_SUCCESS);
}

static void device_uuid(int dev, sg_uuid *uuid) {
    static const unsigned char base[16] = {0x51, 0x6d, 0x47, 0x50, 0x55, 0x00, 0x4e, 0x00,
                                           0x80, 0x00, 0x73, 0x69, 0x6d, 0x67, 0x70, 0x00};
    memcpy(uuid->bytes, base, 16);
    uuid->bytes[15] = (unsigned char)dev;
}

SG_API CUresult cuDeviceGetUuid(sg_uuid *uuid, CUdevice dev) {
    API_BEGIN_ARGS("cuDeviceGetUuid", 0, LA(uuid), LA(dev));
    API_NEED_INIT();
    if (uuid == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!sg_device_valid(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    device_uuid(dev, uuid);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuDeviceGetUuid_v2(sg_uuid *uuid, CUdevice dev) {
    API_BEGIN_ARGS("cuDeviceGetUuid_v2", 0, LA(uuid), LA(dev));
    API_NEED_INIT();
    if (uuid == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!sg_device_valid(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    device_uuid(dev, uuid);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuDeviceGetLuid(char *luid, unsigned int *mask, CUdevice dev) {
    API_BEGIN_ARGS("cuDeviceGetLuid", LOG_OUT32(1), LA(luid), LA(mask), LA(dev));
    API_NEED_INIT();
    (void)luid;
    (void)mask;
    if (!sg_device_valid(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    API_RETURN(CUDA_ERROR_NOT_SUPPORTED); /* a LUID exists on Windows only */
}

SG_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    API_BEGIN_ARGS("cuDeviceTotalMem_v2", LOG_OUT64(0), LA(bytes), LA(dev));
    API_NEED_INIT();
    if (bytes == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!sg_device_valid(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    *bytes = sg_cfg.device_bytes;
    API_RETURN(CUDA_SUCCESS);
}

/* Attribute values of a Hopper-class device (compute capability 9.0). */
static int attribute_value(int attrib, int dev, int *value) {
    switch (attrib) {
    case 1: *value = 1024; return 1;              /* max threads per block */
    case 2: case 3: *value = 1024; return 1;      /* max block dim x, y */
    case 4: *value = 64; return 1;                /* max block dim z */
    case 5: *value = 2147483647; return 1;        /* max grid dim x */
    case 6: case 7: *value = 65535; return 1;     /* max grid dim y, z */
    case 8: *value = 49152; return 1;             /* shared memory per block */
    case 9: *value = 65536; return 1;             /* constant memory */
    case 10: *value = 32; return 1;               /* warp size */
    case 11: *value = SG_MAX_PITCH; return 1;     /* max pitch (cuMemcpy2D enforces it) */
    case 12: *value = 65536; return 1;            /* registers per block */
    case 13: *value = 1980000; return 1;          /* clock rate (kHz) */
    case 14: *value = 512; return 1;              /* texture alignment */
    case 15: *value = 1; return 1;                /* copy/compute overlap */
    case 16: *value = 132; return 1;              /* multiprocessors */
    case 17: *value = 0; return 1;                /* kernel timeout */
    case 18: *value = 0; return 1;                /* integrated */
    case 19: *value = 1; return 1;                /* can map host memory */
    case 20: *value = 0; return 1;                /* compute mode: default */
    case 21: *value = 131072; return 1;
    case 22: *value = 131072; return 1;
    case 23: *value = 65536; return 1;
    case 24: case 25: case 26: *value = 16384; return 1;
    case 27: *value = 32768; return 1;
    case 28: *value = 32768; return 1;
    case 29: *value = 2048; return 1;
    case 30: *value = 512; return 1;              /* surface alignment */
    case 31: *value = 1; return 1;                /* concurrent kernels */
    case 32: *value = 1; return 1;                /* ECC */
    case 33: *value = 0x10 + dev; return 1;       /* PCI bus */
    case 34: *value = 0; return 1;                /* PCI device */
    case 35: *value = 0; return 1;                /* TCC */
    case 36: *value = 2619000; return 1;          /* memory clock (kHz) */
    case 37: *value = 5120; return 1;             /* memory bus width */
    case 38: *value = 52428800; return 1;         /* L2 size */
    case 39: *value = 2048; return 1;             /* threads per multiprocessor */
    case 40: *value = 3; return 1;                /* copy engines */
    case 41: *value = 1; return 1;                /* unified addressing */
    case 50: *value = 0; return 1;                /* PCI domain */
    case 51: *value = 32; return 1;               /* texture pitch alignment */
    case 75: *value = sg_compute_capability() / 10; return 1; /* compute capability major */
    case 76: *value = sg_compute_capability() % 10; return 1; /* compute capability minor */
    case 78: *value = 1; return 1;                /* stream priorities */
    case 79: case 80: *value = 1; return 1;       /* L1 caches */
    case 81: *value = 233472; return 1;           /* shared memory per multiprocessor */
    case 82: *value = 65536; return 1;            /* registers per multiprocessor */
    case 83: *value = 1; return 1;                /* managed memory */
    case 84: *value = 0; return 1;                /* multi-GPU board */
    case 85: *value = dev; return 1;              /* board group */
    case 86: *value = 0; return 1;
    case 87: *value = 2; return 1;
    case 88: *value = 0; return 1;                /* pageable memory access */
    case 89: *value = 0; return 1;                /* concurrent managed access: no managed pools */
    case 90: *value = 1; return 1;                /* compute preemption */
    case 91: *value = 1; return 1;                /* host pointer usable for registered memory */
    case 92: case 93: case 94: *value = 0; return 1;
    case 95: *value = 1; return 1;                /* cooperative launch */
    case 96: *value = 0; return 1;
    case 97: *value = 232448; return 1;           /* opt-in shared memory per block */
    case 98: *value = 0; return 1;
    case 99: *value = 1; return 1;                /* host register */
    case 100: *value = 0; return 1;
    case 101: *value = 0; return 1;
    case 102: *value = 0; return 1;               /* virtual memory management: absent */
    case 103: *value = 0; return 1;               /* POSIX fd export of cuMemCreate memory: no VMM
                                                     (pools say theirs in 119) */
    case 104: case 105: *value = 0; return 1;
    case 106: *value = 32; return 1;              /* blocks per multiprocessor */
    case 107: *value = 1; return 1;
    case 108: *value = 34078720; return 1;
    case 109: *value = 134213632; return 1;
    case 110: *value = 0; return 1;               /* GPUDirect RDMA with VMM: no VMM */
    case 111: *value = 1024; return 1;            /* reserved shared memory per block */
    case 112: *value = 0; return 1;               /* sparse CUDA arrays: no CUDA arrays */
    case 113: *value = 1; return 1;               /* read-only host registration */
    case 114: *value = 0; return 1;               /* timeline semaphores: no external semaphores */
    case 115: *value = 1; return 1;               /* memory pools */
    case 116: *value = 1; return 1;
    case 117: *value = 1; return 1;
    case 118: *value = 100; return 1;
    case 119: *value = 1; return 1;               /* pool handle types: POSIX file descriptors */
    case 120: *value = 1; return 1;               /* cluster launch */
    case 121: *value = 0; return 1;               /* deferred-mapping CUDA arrays: no CUDA arrays */
    case 122: case 123: *value = 0; return 1;     /* stream memory operations: absent */
    case 124: *value = 0; return 1;
    case 125: *value = 1; return 1;               /* IPC events (ipc.c) */
    case 126: *value = 4; return 1;
    case 127: *value = 1; return 1;               /* tensor maps */
    case 128: *value = 0; return 1;
    case 129: *value = 0; return 1;
    case 130: *value = 0; return 1;               /* NUMA config: none */
    case 131: *value = -1; return 1;
    case 132: *value = 0; return 1;
    case 133: *value = 0; return 1;
    case 134: *value = -1; return 1;
    default:
        if (attrib >= 42 && attrib <= 74) { *value = 65536; return 1; } /* texture/surface limits */
        if (attrib == 77) { *value = 32768; return 1; }
        if (attrib >= 135 && attrib <= 147) { *value = 0; return 1; }
        return 0;
    }
}

SG_API CUresult cuDeviceGetAttribute(int *value, int attrib, CUdevice dev) {
    API_BEGIN_ARGS("cuDeviceGetAttribute", LOG_OUT32(0), LA(value), LA(attrib), LA(dev));
    API_NEED_INIT();
    if (value == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!sg_device_valid(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    if (!attribute_value(attrib, dev, value)) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev) {
    API_BEGIN_ARGS("cuDeviceComputeCapability", LOG_OUT32(0) | LOG_OUT32(1), LA(major), LA(minor), LA(dev));
    API_NEED_INIT();
    if (major == NULL || minor == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!sg_device_valid(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    int capability = sg_compute_capability();
    *major = capability / 10;
    *minor = capability % 10;
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuDeviceGetPCIBusId(char *bus_id, int len, CUdevice dev) {
    API_BEGIN_ARGS("cuDeviceGetPCIBusId", 0, LA(bus_id), LA(len), LA(dev));
    API_NEED_INIT();
    if (bus_id == NULL || len <= 0) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!sg_device_valid(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    snprintf(bus_id, (size_t)len, "0000:%02X:00.0", 0x10 + dev);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *bus_id) {
    API_BEGIN_ARGS("cuDeviceGetByPCIBusId", LOG_OUT32(0), LA(dev), LA(bus_id));
    API_NEED_INIT();
    if (dev == NULL || bus_id == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    unsigned domain = 0, bus = 0, device = 0, function = 0;
    int n = sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &device, &function);
    if (n < 3) {
        n = sscanf(bus_id, "%x:%x.%x", &bus, &device, &function);
        if (n < 2) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    }
    int ordinal = (int)bus - 0x10;
    if (domain != 0 || device != 0 || !sg_device_valid(ordinal)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    *dev = ordinal;
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer) {
    API_BEGIN_ARGS("cuDeviceCanAccessPeer", LOG_OUT32(0), LA(can), LA(dev), LA(peer));
    API_NEED_INIT();
    if (can == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!sg_device_valid(dev) || !sg_device_valid(peer)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    *can = dev != peer;
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuDeviceGetP2PAttribute(int *value, int attrib, CUdevice src, CUdevice dst) {
    API_BEGIN_ARGS("cuDeviceGetP2PAttribute", LOG_OUT32(0), LA(value), LA(attrib), LA(src), LA(dst));
    API_NEED_INIT();
    if (value == NULL || attrib < 1 || attrib > 5) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!sg_device_valid(src) || !sg_device_valid(dst) || src == dst)
        API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    *value = attrib == 1 ? 0 : 1; /* performance rank 0; access, atomics, arrays supported */
    API_RETURN(CUDA_SUCCESS);
}

/* ---- the per-thread context stack ------------------------------------------------------ */

static __thread uint64_t *tls_stack;
static __thread int tls_depth, tls_cap;

uint64_t sg_current_handle(void) { return tls_depth > 0 ? tls_stack[tls_depth - 1] : 0; }

static int tls_push(uint64_t h) {
    if (tls_depth == tls_cap) {
        int cap = tls_cap ? tls_cap * 2 : 8;
        uint64_t *grown = realloc(tls_stack, (size_t)cap * sizeof *grown);
        if (grown == NULL) return 0;
        tls_stack = grown;
        tls_cap = cap;
    }
    tls_stack[tls_depth++] = h;
    return 1;
}

sg_ctx *sg_ctx_get(uint64_t h, CUresult *err) {
    sg_ctx *c = sg_handle_get(h, K_CTX);
    if (c == NULL) {
        *err = h == 0 ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_CONTEXT_IS_DESTROYED;
        return NULL;
    }
    if (!c->active) {
        /* A primary context released to zero (or never retained). */
        *err = CUDA_ERROR_INVALID_CONTEXT;
        return NULL;
    }
    return c;
}

sg_ctx *sg_current_ctx(CUresult *err) {
    uint64_t h = sg_current_handle();
    if (h == 0) {
        *err = CUDA_ERROR_INVALID_CONTEXT;
        return NULL;
    }
    return sg_ctx_get(h, err);
}

/* ---- primary contexts ---------------------------------------------------------------- */

SG_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    API_BEGIN_ARGS("cuDevicePrimaryCtxRetain", LOG_OUT64(0), LA(pctx), LA(dev));
    API_NEED_INIT();
    if (pctx == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!sg_device_valid(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = primaries[dev];
    ctx_activate(c);
    c->refcount++;
    *pctx = P(c->o.h);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(CUDA_SUCCESS);
}

/* Waits for the context's work, then destroys its streams, events, modules and
 * memory (lock held). */
static void ctx_reset(sg_ctx *c) {
    sg_wait_ctx_idle(c);
    sg_ctx_teardown(c);
    c->generation++;
}

static CUresult primary_release(CUdevice dev) {
    if (!sg_device_valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = primaries[dev];
    if (c->refcount <= 0) {
        pthread_mutex_unlock(&sg_lock);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (--c->refcount == 0 && c->active) {
        ctx_reset(c);
        c->active = 0;
    }
    pthread_mutex_unlock(&sg_lock);
    return CUDA_SUCCESS;
}

SG_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
    API_BEGIN_ARGS("cuDevicePrimaryCtxRelease", 0, LA(dev));
    API_NEED_INIT();
    API_RETURN(primary_release(dev));
}

SG_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    API_BEGIN_ARGS("cuDevicePrimaryCtxRelease_v2", 0, LA(dev));
    API_NEED_INIT();
    API_RETURN(primary_release(dev));
}

static CUresult primary_reset(CUdevice dev) {
    if (!sg_device_valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = primaries[dev];
    if (c->active) {
        ctx_reset(c);
        c->active = 0;
        /* Resetting does not release: a context still retained comes back at once,
         * with the same handle and none of its old streams or events. */
        if (c->refcount > 0) ctx_activate(c);
    }
    pthread_mutex_unlock(&sg_lock);
    return CUDA_SUCCESS;
}

SG_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
    API_BEGIN_ARGS("cuDevicePrimaryCtxReset", 0, LA(dev));
    API_NEED_INIT();
    API_RETURN(primary_reset(dev));
}

SG_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
    API_BEGIN_ARGS("cuDevicePrimaryCtxReset_v2", 0, LA(dev));
    API_NEED_INIT();
    API_RETURN(primary_reset(dev));
}

static CUresult primary_set_flags(CUdevice dev, unsigned flags) {
    if (!sg_device_valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
    if (flags & ~0xFFu) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sg_lock);
    primaries[dev]->flags = flags;
    pthread_mutex_unlock(&sg_lock);
    return CUDA_SUCCESS;
}

SG_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
    API_BEGIN_ARGS("cuDevicePrimaryCtxSetFlags", 0, LA(dev), LA(flags));
    API_NEED_INIT();
    API_RETURN(primary_set_flags(dev, flags));
}

SG_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
    API_BEGIN_ARGS("cuDevicePrimaryCtxSetFlags_v2", 0, LA(dev), LA(flags));
    API_NEED_INIT();
    API_RETURN(primary_set_flags(dev, flags));
}

SG_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
    API_BEGIN_ARGS("cuDevicePrimaryCtxGetState", LOG_OUT32(1) | LOG_OUT32(2), LA(dev), LA(flags), LA(active));
    API_NEED_INIT();
    if (flags == NULL || active == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!sg_device_valid(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    pthread_mutex_lock(&sg_lock);
    *flags = primaries[dev]->flags;
    *active = primaries[dev]->active;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(CUDA_SUCCESS);
}

/* ---- created contexts ------------------------------------------------------------------- */

static CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev) {
    if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (!sg_device_valid(dev)) return CUDA_ERROR_INVALID_DEVICE;
    if (flags & ~0xFFu) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = ctx_new(dev, 0);
    if (c == NULL) {
        pthread_mutex_unlock(&sg_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->flags = flags;
    ctx_activate(c);
    c->refcount = 1;
    tls_push(c->o.h);
    *pctx = P(c->o.h);
    pthread_mutex_unlock(&sg_lock);
    return CUDA_SUCCESS;
}

SG_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    API_BEGIN_ARGS("cuCtxCreate_v2", LOG_OUT64(0), LA(pctx), LA(flags), LA(dev));
    API_NEED_INIT();
    API_RETURN(ctx_create(pctx, flags, dev));
}

SG_API CUresult cuCtxCreate_v3(CUcontext *pctx, void *params, int nparams, unsigned int flags,
                               CUdevice dev) {
    API_BEGIN_ARGS("cuCtxCreate_v3", LOG_OUT64(0), LA(pctx), LA(params), LA(nparams), LA(flags), LA(dev));
    API_NEED_INIT();
    if (nparams < 0 || (nparams > 0 && params == NULL)) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (nparams > 0) API_RETURN(CUDA_ERROR_NOT_SUPPORTED); /* execution affinity */
    API_RETURN(ctx_create(pctx, flags, dev));
}

typedef struct {
    void *affinity;
    int naffinity;
    void *cig;
} sg_ctx_create_params;

SG_API CUresult cuCtxCreate_v4(CUcontext *pctx, sg_ctx_create_params *params, unsigned int flags,
                               CUdevice dev) {
    API_BEGIN_ARGS("cuCtxCreate_v4", LOG_OUT64(0), LA(pctx), LA(params), LA(flags), LA(dev));
    API_NEED_INIT();
    if (params != NULL && (params->naffinity != 0 || params->cig != NULL))
        API_RETURN(CUDA_ERROR_NOT_SUPPORTED);
    API_RETURN(ctx_create(pctx, flags, dev));
}

SG_API CUresult cuCtxDestroy_v2(CUcontext ctx) {
    API_BEGIN_ARGS("cuCtxDestroy_v2", 0, LA(ctx));
    API_NEED_INIT();
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = sg_handle_get(H(ctx), K_CTX);
    if (c == NULL) {
        pthread_mutex_unlock(&sg_lock);
        API_RETURN(ctx == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_CONTEXT);
    }
    if (c->primary) {
        pthread_mutex_unlock(&sg_lock);
        API_RETURN(CUDA_ERROR_INVALID_CONTEXT);
    }
    sg_wait_ctx_idle(c);
    sg_ctx_teardown(c);
    sg_handle_drop(c->o.h);
    /* Popped from this thread's stack if current here; other threads keep the dead
     * handle and get CONTEXT_IS_DESTROYED. */
    if (tls_depth > 0 && tls_stack[tls_depth - 1] == H(ctx)) tls_depth--;
    free(c->streams);
    if (c->ck_retired != NULL) sg_ck_vc_free(c->ck_retired);
    free(c);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
    API_BEGIN_ARGS("cuCtxPushCurrent_v2", 0, LA(ctx));
    API_NEED_INIT();
    if (ctx == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = sg_handle_get(H(ctx), K_CTX);
    pthread_mutex_unlock(&sg_lock);
    if (c == NULL) API_RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (!tls_push(H(ctx))) API_RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
    API_BEGIN_ARGS("cuCtxPopCurrent_v2", LOG_OUT64(0), LA(pctx));
    API_NEED_INIT();
    if (tls_depth == 0) API_RETURN(CUDA_ERROR_INVALID_CONTEXT);
    uint64_t h = tls_stack[--tls_depth];
    if (pctx != NULL) *pctx = P(h);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuCtxSetCurrent(CUcontext ctx) {
    API_BEGIN_ARGS("cuCtxSetCurrent", 0, LA(ctx));
    API_NEED_INIT();
    if (ctx == NULL) {
        if (tls_depth > 0) tls_depth--;
        API_RETURN(CUDA_SUCCESS);
    }
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = sg_handle_get(H(ctx), K_CTX);
    pthread_mutex_unlock(&sg_lock);
    if (c == NULL) API_RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (tls_depth > 0)
        tls_stack[tls_depth - 1] = H(ctx);
    else if (!tls_push(H(ctx)))
        API_RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuCtxGetCurrent(CUcontext *pctx) {
    API_BEGIN_ARGS("cuCtxGetCurrent", LOG_OUT64(0), LA(pctx));
    API_NEED_INIT();
    if (pctx == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    *pctx = P(sg_current_handle());
    API_RETURN(CUDA_SUCCESS);
}

static CUresult ctx_device(CUdevice *device, uint64_t h) {
    if (device == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = h ? sg_ctx_get(h, &err) : sg_current_ctx(&err);
    if (c != NULL) *device = c->dev;
    pthread_mutex_unlock(&sg_lock);
    return c ? CUDA_SUCCESS : err;
}

SG_API CUresult cuCtxGetDevice(CUdevice *device) {
    API_BEGIN_ARGS("cuCtxGetDevice", LOG_OUT32(0), LA(device));
    API_NEED_INIT();
    API_RETURN(ctx_device(device, 0));
}

SG_API CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) {
    API_BEGIN_ARGS("cuCtxGetDevice_v2", LOG_OUT32(0), LA(device), LA(ctx));
    API_NEED_INIT();
    API_RETURN(ctx_device(device, H(ctx)));
}

SG_API CUresult cuCtxGetFlags(unsigned int *flags) {
    API_BEGIN_ARGS("cuCtxGetFlags", LOG_OUT32(0), LA(flags));
    API_NEED_INIT();
    if (flags == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = sg_current_ctx(&err);
    if (c) *flags = c->flags;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(c ? CUDA_SUCCESS : err);
}

SG_API CUresult cuCtxSetFlags(unsigned int flags) {
    API_BEGIN_ARGS("cuCtxSetFlags", 0, LA(flags));
    API_NEED_INIT();
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = sg_current_ctx(&err);
    if (c) c->flags = flags;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(c ? CUDA_SUCCESS : err);
}

SG_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id) {
    API_BEGIN_ARGS("cuCtxGetId", LOG_OUT64(1), LA(ctx), LA(id));
    API_NEED_INIT();
    if (id == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = ctx ? sg_ctx_get(H(ctx), &err) : sg_current_ctx(&err);
    if (c) *id = c->id;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(c ? CUDA_SUCCESS : err);
}

SG_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version) {
    API_BEGIN_ARGS("cuCtxGetApiVersion", LOG_OUT32(1), LA(ctx), LA(version));
    API_NEED_INIT();
    if (version == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = ctx ? sg_ctx_get(H(ctx), &err) : sg_current_ctx(&err);
    pthread_mutex_unlock(&sg_lock);
    if (c == NULL) API_RETURN(err);
    *version = 3020;
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) {
    API_BEGIN_ARGS("cuCtxGetStreamPriorityRange", LOG_OUT32(0) | LOG_OUT32(1), LA(least), LA(greatest));
    API_NEED_INIT();
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuCtxGetLimit(size_t *value, int limit) {
    API_BEGIN_ARGS("cuCtxGetLimit", LOG_OUT64(0), LA(value), LA(limit));
    API_NEED_INIT();
    if (value == NULL || limit < 0 || limit > 9) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = sg_current_ctx(&err);
    if (c) *value = c->limits[limit];
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(c ? CUDA_SUCCESS : err);
}

SG_API CUresult cuCtxSetLimit(int limit, size_t value) {
    API_BEGIN_ARGS("cuCtxSetLimit", 0, LA(limit), LA(value));
    API_NEED_INIT();
    if (limit < 0 || limit > 9) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = sg_current_ctx(&err);
    if (c) c->limits[limit] = value;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(c ? CUDA_SUCCESS : err);
}

SG_API CUresult cuCtxGetCacheConfig(int *config) {
    API_BEGIN_ARGS("cuCtxGetCacheConfig", LOG_OUT32(0), LA(config));
    API_NEED_INIT();
    if (config == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    *config = 0;
    API_RETURN(CUDA_SUCCESS);
}

SG_API CUresult cuCtxSetCacheConfig(int config) {
    API_BEGIN_ARGS("cuCtxSetCacheConfig", 0, LA(config));
    API_NEED_INIT();
    API_RETURN(config < 0 || config > 3 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
}

SG_API CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
    API_BEGIN_ARGS("cuCtxEnablePeerAccess", 0, LA(peer), LA(flags));
    API_NEED_INIT();
    if (flags != 0) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = sg_current_ctx(&err);
    sg_ctx *p = c ? sg_ctx_get(H(peer), &err) : NULL;
    CUresult r = CUDA_SUCCESS;
    if (c == NULL || p == NULL)
        r = err;
    else if (p->dev == c->dev)
        r = CUDA_ERROR_INVALID_DEVICE;
    else if (c->peer[p->dev])
        r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    else
        c->peer[p->dev] = 1;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuCtxDisablePeerAccess(CUcontext peer) {
    API_BEGIN_ARGS("cuCtxDisablePeerAccess", 0, LA(peer));
    API_NEED_INIT();
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_ctx *c = sg_current_ctx(&err);
    sg_ctx *p = c ? sg_ctx_get(H(peer), &err) : NULL;
    CUresult r = CUDA_SUCCESS;
    if (c == NULL || p == NULL)
        r = err;
    else if (!c->peer[p->dev])
        r = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    else
        c->peer[p->dev] = 0;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

/* ---- context teardown -------------------------------------------------------------------- */

void sg_ctx_teardown(sg_ctx *c) {
    sg_tearing_down = c; /* what is dropped now is recorded as gone with c (sg_handle_drop) */
    sg_events_of_ctx_destroy(c);
    sg_modules_of_ctx_destroy(c);
    /* Streams: every stream of the context goes, the default ones too. */
    while (c->nstreams > 0) sg_stream_destroy(c->streams[c->nstreams - 1]);
    sg_tearing_down = NULL;
    c->legacy = NULL;
    sg_allocs_of_ctx_free(c);
    memset(c->peer, 0, sizeof c->peer);
}
