/* simgpu entry-point lookup: cuGetProcAddress answers each (symbol, CUDA version,
 * flags) the way the driver does: the newest variant of the symbol introduced at
 * or before the requested version; the per-thread-default-stream variant when the
 * flags ask for one.  A symbol known only in variants newer than the requested
 * version is CUDA_SUCCESS with a NULL function and the status
 * CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT (driver 580 on an H200 answered so for
 * cuMemAllocAsync at 11000), so a caller must check the pointer, not only the result.
 * A symbol unknown to the driver, or one (or a variant) the simulator does not
 * implement, is CUDA_SUCCESS with a NULL function and CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
 * from cuGetProcAddress_v2 (driver 580 answered CUDA_SUCCESS for cuNoSuchEntryPoint,
 * although the documentation says CUDA_ERROR_NOT_FOUND), CUDA_ERROR_NOT_FOUND from the
 * first version (no status to say it), so a library that needs more fails at the call
 * that needs it.  simgpu_set_version_not_sufficient makes one symbol
 * answer VERSION_NOT_SUFFICIENT at every version (a driver older than its caller). */
#include "sim.h"

/* Unprototyped declarations: only the addresses are taken here. */
#define DECL(fn) extern CUresult fn();
#define V(sym, ver, fn) DECL(fn)
#define VP(sym, ver, fn, ptds) DECL(fn) DECL(ptds)
#define VNONE(sym, ver)
#include "procs.inc"
#undef V
#undef VP
#undef VNONE
#undef DECL

typedef struct {
    const char *symbol;
    int version;
    void *fn;   /* NULL: a variant the simulator does not implement */
    void *ptds; /* the per-thread-default-stream variant, or NULL */
} proc_entry;

static const proc_entry procs[] = {
#define V(sym, ver, fn) {sym, ver, (void *)fn, NULL},
#define VP(sym, ver, fn, ptds) {sym, ver, (void *)fn, (void *)ptds},
#define VNONE(sym, ver) {sym, ver, NULL, NULL},
#include "procs.inc"
#undef V
#undef VP
#undef VNONE
};

enum { FOUND = 0, SYMBOL_NOT_FOUND = 1, VERSION_NOT_SUFFICIENT = 2 };
enum { FLAG_LEGACY_STREAM = 1, FLAG_PER_THREAD = 2 };

/* The symbol simgpu_set_version_not_sufficient named ("" : none). */
static char too_new[128];
static pthread_mutex_t too_new_lock = PTHREAD_MUTEX_INITIALIZER;

static int is_too_new(const char *symbol) {
    pthread_mutex_lock(&too_new_lock);
    int match = too_new[0] != '\0' && strcmp(too_new, symbol) == 0;
    pthread_mutex_unlock(&too_new_lock);
    return match;
}

/* Exported for tests: cuGetProcAddress answers `symbol` (NULL: none) as introduced after
 * any version asked for (SUCCESS, NULL, VERSION_NOT_SUFFICIENT) until called again.
 * Returns 0, or -1 for a name too long. */
SG_API int simgpu_set_version_not_sufficient(const char *symbol) {
    if (symbol != NULL && strlen(symbol) >= sizeof too_new) return -1;
    pthread_mutex_lock(&too_new_lock);
    snprintf(too_new, sizeof too_new, "%s", symbol ? symbol : "");
    pthread_mutex_unlock(&too_new_lock);
    return 0;
}

static CUresult lookup(const char *symbol, void **pfn, int version, cuuint64_t flags, int *status) {
    int st = SYMBOL_NOT_FOUND;
    const proc_entry *best = NULL;
    if (pfn != NULL) *pfn = NULL;
    if (symbol == NULL || pfn == NULL || (flags & ~3ULL) || flags == 3) {
        if (status) *status = SYMBOL_NOT_FOUND;
        return CUDA_ERROR_INVALID_VALUE;
    }
    int held_back = is_too_new(symbol);
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
        if (strcmp(procs[i].symbol, symbol) != 0) continue;
        if (procs[i].version <= version && !held_back) {
            if (best == NULL || procs[i].version > best->version) best = &procs[i];
        } else if (st == SYMBOL_NOT_FOUND) {
            st = VERSION_NOT_SUFFICIENT;
        }
    }
    if (best != NULL && best->fn != NULL) {
        *pfn = (flags & FLAG_PER_THREAD) && best->ptds ? best->ptds : best->fn;
        st = FOUND;
    } else if (best != NULL) {
        st = SYMBOL_NOT_FOUND;
    }
    if (status) *status = st;
    if (sg_cfg.trace >= 2 || (sg_cfg.trace && st != FOUND && getenv("SIMGPU_TRACE_LOOKUPS")))
        fprintf(stderr, "simgpu: cuGetProcAddress(%s, %d, %llu) -> %s\n", symbol, version, flags,
                st == FOUND ? "found" : st == VERSION_NOT_SUFFICIENT ? "version not sufficient" : "not found");
    return st == SYMBOL_NOT_FOUND && status == NULL ? CUDA_ERROR_NOT_FOUND : CUDA_SUCCESS;
}

SG_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                    int *status) {
    sg_load_config();
    return lookup(symbol, pfn, version, flags, status);
}

SG_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags) {
    sg_load_config();
    return lookup(symbol, pfn, version, flags, NULL);
}

/* Exported for tests: how many symbols and variants the table lists. */
SG_API int simgpu_proc_count(void) { return (int)(sizeof procs / sizeof procs[0]); }
