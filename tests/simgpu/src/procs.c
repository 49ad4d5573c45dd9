/* simgpu entry-point lookup: cuGetProcAddress answers each (symbol, CUDA version,
 * flags) the way the driver does: the newest variant of the symbol introduced at
 * or before the requested version; the per-thread-default-stream variant when the
 * flags ask for one.  A symbol (or a variant) the simulator does not implement is
 * "not found", so a library that needs more fails at the call that needs it. */
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

static CUresult lookup(const char *symbol, void **pfn, int version, cuuint64_t flags, int *status) {
    int st = SYMBOL_NOT_FOUND;
    const proc_entry *best = NULL;
    if (pfn != NULL) *pfn = NULL;
    if (symbol == NULL || pfn == NULL || (flags & ~3ULL) || flags == 3) {
        if (status) *status = SYMBOL_NOT_FOUND;
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
        if (strcmp(procs[i].symbol, symbol) != 0) continue;
        if (procs[i].version <= version) {
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
    return st == FOUND ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
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
