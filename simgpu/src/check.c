/* simgpu stream-order checker: which operations the program ordered, whatever the timing.
 *
 * SIMGPU_CHECK=1 (or simgpu_set_check) makes the simulator keep, on the host side and at
 * enqueue time (under sg_lock, never in the workers), a vector clock per stream, one for
 * the host and a snapshot per event, and check every access of device-visible memory
 * against the accesses recorded before it:
 *
 *   - each stream has a slot (never reused); every operation enqueued on it (not captured)
 *     ticks the stream's own entry and takes the epoch (slot, tick);
 *   - happens-before edges: program order on a stream; an event record snapshots the
 *     recording stream's clock and cuStreamWaitEvent joins the snapshot of the event's
 *     last record at the call; the legacy stream joins every blocking stream of its
 *     context and a blocking stream joins the legacy stream (whether or not that work has
 *     run: order, not time); the host joins what it saw complete (a query answering
 *     SUCCESS, a synchronisation, a synchronous call that waited), and every enqueue
 *     joins the host clock into its stream first;
 *   - one host clock for the whole process: the checker cannot see the host's own
 *     synchronisation (locks, queues, thread starts), so what any host thread saw
 *     complete orders what every host thread enqueues next;
 *   - accesses are records (byte range, epoch, read or write, the operation) per
 *     allocation, FastTrack-style: an access not ordered after another stream's write of
 *     the same bytes, or a write not ordered after another stream's read, is a race; a
 *     free not ordered after every recorded access is a free while in use; a kernel's
 *     pointer into memory freed and not allocated again is a use after free.
 *
 * Clocks are sparse sorted (slot, value) arrays: a join costs the entries both sides have.
 * A slot is dead once its stream has drained after its destruction and no access record
 * names it; joins drop dead entries, so clocks hold the live streams and those that
 * records still name, not every stream ever made.  Records per allocation are bounded
 * (MAX_RECORDS, oldest dropped first: a report may be missed, none is made up), and so
 * are tombstones (MAX_TOMBS) and the reports kept for simgpu_check_report (KEEP_REPORTS).
 *
 * Switching the checker on starts from an empty history (ck_gen: every clock, snapshot
 * and record of an older generation reads as empty), so work enqueued before is unknown
 * and can cause no report. */
#include "sim.h"

#include <stdarg.h>

int sg_check_mode;

#define MAX_RECORDS 256   /* access records kept per allocation */
#define MAX_TOMBS 4096    /* freed ranges remembered for use-after-free */
#define MAX_ROWS 64       /* ranges per copy or memset end before its bounding span stands in */
#define KEEP_REPORTS 256  /* report texts kept for simgpu_check_report */
#define PAIR_CAP 16384    /* operation pairs remembered, so none is reported twice */

static void *ck_oom(void) {
    fprintf(stderr, "simgpu: the stream-order checker ran out of host memory\n");
    abort();
}

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    return q != NULL ? q : ck_oom();
}

static void *xcalloc(size_t n, size_t size) {
    void *q = calloc(n ? n : 1, size);
    return q != NULL ? q : ck_oom();
}

/* Bumped at every switch on: clocks, snapshots and records of older generations are empty. */
static unsigned ck_gen = 1;

/* ---- slots ------------------------------------------------------------------------------ */

typedef struct {
    int32_t refs;            /* access records naming the slot */
    unsigned char destroyed; /* its stream was destroyed and has drained */
} slot_info;
static slot_info *slots;
static uint32_t nslots = 1, cap_slots; /* slot 0 is never handed out */

static uint32_t slot_new(void) {
    if (nslots >= cap_slots) {
        cap_slots = cap_slots ? cap_slots * 2 : 256;
        slots = xrealloc(slots, cap_slots * sizeof *slots);
    }
    slots[nslots].refs = 0;
    slots[nslots].destroyed = 0;
    return nslots++;
}

/* No operation can be enqueued with the slot again, and no record names it: its entry in
 * any clock can never decide an order any more. */
static int slot_dead(uint32_t s) { return slots[s].destroyed && slots[s].refs <= 0; }

/* ---- vector clocks -------------------------------------------------------------------------- */

typedef struct {
    uint32_t slot;
    uint64_t val;
} vc_entry;

typedef struct sg_vc {
    unsigned gen;
    int n, cap;
    vc_entry *e; /* sorted by slot */
} sg_vc;

static int vc_live(const sg_vc *v) { return v != NULL && v->gen == ck_gen; }

static void vc_reset(sg_vc *v) {
    v->n = 0;
    v->gen = ck_gen;
}

static void vc_reserve(sg_vc *v, int n) {
    if (n <= v->cap) return;
    int cap = v->cap ? v->cap : 4;
    while (cap < n) cap *= 2;
    v->e = xrealloc(v->e, (size_t)cap * sizeof *v->e);
    v->cap = cap;
}

static int vc_find(const sg_vc *v, uint32_t slot) { /* the first entry whose slot >= slot */
    int lo = 0, hi = v->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (v->e[mid].slot < slot)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static uint64_t vc_get(const sg_vc *v, uint32_t slot) {
    if (!vc_live(v)) return 0;
    int i = vc_find(v, slot);
    return i < v->n && v->e[i].slot == slot ? v->e[i].val : 0;
}

static void vc_set(sg_vc *v, uint32_t slot, uint64_t val) {
    if (!vc_live(v)) vc_reset(v);
    int i = vc_find(v, slot);
    if (i < v->n && v->e[i].slot == slot) {
        if (val > v->e[i].val) v->e[i].val = val;
        return;
    }
    vc_reserve(v, v->n + 1);
    memmove(&v->e[i + 1], &v->e[i], (size_t)(v->n - i) * sizeof *v->e);
    v->e[i].slot = slot;
    v->e[i].val = val;
    v->n++;
}

static vc_entry *scratch;
static int cap_scratch;

/* dst = max(dst, src), entry by entry; dead slots are dropped from both. */
static void vc_join(sg_vc *dst, const sg_vc *src) {
    if (!vc_live(src) || src->n == 0) return;
    if (!vc_live(dst)) vc_reset(dst);
    int need = dst->n + src->n;
    if (need > cap_scratch) {
        cap_scratch = need * 2;
        scratch = xrealloc(scratch, (size_t)cap_scratch * sizeof *scratch);
    }
    int i = 0, j = 0, m = 0;
    while (i < dst->n || j < src->n) {
        vc_entry x;
        if (j >= src->n || (i < dst->n && dst->e[i].slot < src->e[j].slot)) {
            x = dst->e[i++];
        } else if (i >= dst->n || src->e[j].slot < dst->e[i].slot) {
            x = src->e[j++];
        } else {
            x = dst->e[i++];
            if (src->e[j].val > x.val) x.val = src->e[j].val;
            j++;
        }
        if (!slot_dead(x.slot)) scratch[m++] = x;
    }
    vc_reserve(dst, m);
    if (m > 0) memcpy(dst->e, scratch, (size_t)m * sizeof *scratch);
    dst->n = m;
}

static sg_vc *vc_copy(const sg_vc *src) {
    if (!vc_live(src)) return NULL;
    sg_vc *v = xcalloc(1, sizeof *v);
    v->gen = ck_gen;
    vc_join(v, src);
    return v;
}

void sg_ck_vc_free(sg_vc *v) {
    if (v == NULL) return;
    free(v->e);
    free(v);
}

/* ---- the host clock and the streams' ------------------------------------------------------ */

static sg_vc host_vc;
static uint64_t host_version = 1; /* bumped whenever host_vc changes */

struct sg_ck_stream {
    uint32_t slot;
    uint64_t tick; /* operations enqueued while checking (monotone across generations) */
    unsigned gen;
    sg_vc vc;      /* changes only in sg_ck_enqueue, which then ticks */
    uint64_t host_seen;                   /* host_version last joined */
    uint32_t legacy_slot;                 /* a blocking stream: the legacy clock last joined, */
    uint64_t legacy_tick;                 /* named by its slot and tick */
    uint32_t into_slot;                   /* this clock was last joined into the legacy stream */
    uint64_t into_tick;                   /* of slot into_slot at this tick */
};

static struct sg_ck_stream *st_get(sg_stream *s) {
    struct sg_ck_stream *st = s->ck;
    if (st == NULL) {
        st = xcalloc(1, sizeof *st);
        st->slot = slot_new();
        s->ck = st;
    }
    if (st->gen != ck_gen) {
        st->gen = ck_gen;
        vc_reset(&st->vc);
        st->host_seen = 0;
        st->legacy_slot = st->into_slot = 0;
        st->legacy_tick = st->into_tick = 0;
    }
    return st;
}

static sg_vc *st_clock(sg_stream *s) {
    return s->ck != NULL && s->ck->gen == ck_gen ? &s->ck->vc : NULL;
}

void sg_ck_stream_free(sg_stream *s) {
    struct sg_ck_stream *st = s->ck;
    s->ck = NULL;
    if (st == NULL) return;
    slots[st->slot].destroyed = 1;
    free(st->vc.e);
    free(st);
}

/* A destroyed stream's clock is final (no handle names it any more): it joins its
 * context's retired clock, which a context synchronisation observes with the rest. */
void sg_ck_stream_destroyed(sg_stream *s) {
    sg_vc *v = st_clock(s);
    if (v == NULL) return;
    sg_ctx *c = s->ctx;
    if (c->ck_retired == NULL) c->ck_retired = xcalloc(1, sizeof *c->ck_retired);
    vc_join(c->ck_retired, v);
}

sg_vc *sg_ck_stream_clock(sg_stream *s) { return vc_copy(st_clock(s)); }

void sg_ck_ctx_clock(sg_ctx *c, sg_vc **acc) {
    if (*acc == NULL) {
        *acc = xcalloc(1, sizeof **acc);
        (*acc)->gen = ck_gen;
    }
    for (int i = 0; i < c->nstreams; i++) vc_join(*acc, st_clock(c->streams[i]));
    vc_join(*acc, c->ck_retired);
}

void sg_ck_observe(sg_vc *v) {
    if (v != NULL && SG_CHECKING() && vc_live(v)) {
        vc_join(&host_vc, v);
        host_version++;
    }
    sg_ck_vc_free(v);
}

/* ---- events ---------------------------------------------------------------------------------- */

void sg_ck_event_recorded(sg_event *e, sg_stream *s) {
    struct sg_ck_stream *st = st_get(s);
    if (e->ck == NULL) e->ck = xcalloc(1, sizeof *e->ck);
    vc_reset(e->ck);
    vc_join(e->ck, &st->vc);
}

void sg_ck_event_forget(sg_event *e) {
    if (e->ck != NULL) vc_reset(e->ck);
}

sg_vc *sg_ck_event_clock(const sg_event *e) { return vc_copy(e->ck); }

/* ---- operation descriptions, for reports ----------------------------------------------------- */

typedef struct ck_desc {
    int refs;
    uint64_t id;       /* unique per operation */
    const char *entry; /* the entry point that built it */
    const char *via;   /* the entry point that replayed it (a graph launch), or NULL */
    uint64_t stream;   /* 0: the host */
    int stream_kind;
    char *kernel;      /* a launch's kernel, or NULL */
} ck_desc;

static uint64_t next_op_id = 1;

static ck_desc *desc_make(const char *entry, const char *via, sg_stream *s, const char *kernel) {
    ck_desc *d = xcalloc(1, sizeof *d);
    d->refs = 1;
    d->id = next_op_id++;
    d->entry = entry;
    d->via = via;
    d->stream = s != NULL ? s->o.h : 0;
    d->stream_kind = s != NULL ? s->kind : SK_USER;
    if (kernel != NULL) {
        d->kernel = strdup(kernel);
        if (d->kernel == NULL) ck_oom();
    }
    return d;
}

static void desc_unref(ck_desc *d) {
    if (d == NULL || --d->refs > 0) return;
    free(d->kernel);
    free(d);
}

/* "cuLaunchKernel of kernel fill (replayed by cuGraphLaunch) on stream 0x... (legacy)" */
static void desc_text(const ck_desc *d, char *buf, size_t cap) {
    char stream[96];
    if (d->stream == 0)
        snprintf(stream, sizeof stream, "on the host");
    else
        snprintf(stream, sizeof stream, "on stream 0x%llx%s", (unsigned long long)d->stream,
                 d->stream_kind == SK_LEGACY       ? " (legacy)"
                 : d->stream_kind == SK_PER_THREAD ? " (per-thread)"
                                                   : "");
    snprintf(buf, cap, "%s%s%s%s%s%s %s", d->entry, d->kernel ? " of kernel " : "", d->kernel ? d->kernel : "",
             d->via ? " (replayed by " : "", d->via ? d->via : "", d->via ? ")" : "", stream);
}

static const char *verb(unsigned mode) {
    return mode == 1 ? "reads" : mode == 2 ? "writes" : "reads and writes";
}

static const char *verb_ing(unsigned mode) {
    return mode == 1 ? "reading" : mode == 2 ? "writing" : "reading and writing";
}

/* ---- reports ------------------------------------------------------------------------------------ */

static char *reports[KEEP_REPORTS];
static long nreports;
static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t (*pairs)[2];
static size_t npairs;

/* Whether the pair (a, b) is new (and now remembered). */
static int pair_first(uint64_t a, uint64_t b) {
    if (pairs == NULL) pairs = xcalloc(PAIR_CAP, sizeof *pairs);
    if (npairs * 4 >= (size_t)PAIR_CAP * 3) { /* full: forget them all (a pair may come again) */
        memset(pairs, 0, (size_t)PAIR_CAP * sizeof *pairs);
        npairs = 0;
    }
    uint64_t k = a * 0x9e3779b97f4a7c15ULL ^ b;
    k ^= k >> 31;
    size_t mask = PAIR_CAP - 1, i = (size_t)k & mask;
    while (pairs[i][0] != 0) {
        if (pairs[i][0] == a && pairs[i][1] == b) return 0;
        i = (i + 1) & mask;
    }
    pairs[i][0] = a;
    pairs[i][1] = b;
    npairs++;
    return 1;
}

__attribute__((format(printf, 1, 2))) static void report(const char *fmt, ...) {
    char text[2048];
    int n = snprintf(text, sizeof text, "simgpu: check: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text + n, sizeof text - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", text);
    fflush(stderr);
    char *kept = strdup(text);
    pthread_mutex_lock(&report_lock);
    free(reports[nreports % KEEP_REPORTS]);
    reports[nreports % KEEP_REPORTS] = kept;
    nreports++;
    pthread_mutex_unlock(&report_lock);
    sg_count("check_reports", 1);
    if (sg_check_mode == 2) abort(); /* SIMGPU_CHECK=abort: the first report ends the process */
}

/* ---- access records -------------------------------------------------------------------------------- */

typedef struct {
    CUdeviceptr lo, hi;
    uint32_t slot;
    uint64_t val;
    unsigned char mode; /* 1 read, 2 write, 3 both */
    ck_desc *d;
} ck_rec;

typedef struct sg_ck_alloc {
    unsigned gen;
    int n, cap;
    ck_rec *r; /* in the order they were made */
} sg_ck_alloc;

static void rec_push(sg_ck_alloc *ck, const ck_rec *r) {
    if (ck->n == ck->cap) {
        ck->cap = ck->cap ? ck->cap * 2 : 4;
        ck->r = xrealloc(ck->r, (size_t)ck->cap * sizeof *ck->r);
    }
    ck->r[ck->n++] = *r;
    slots[r->slot].refs++;
    r->d->refs++;
}

static void rec_remove(sg_ck_alloc *ck, int i) {
    slots[ck->r[i].slot].refs--;
    desc_unref(ck->r[i].d);
    memmove(&ck->r[i], &ck->r[i + 1], (size_t)(ck->n - i - 1) * sizeof *ck->r);
    ck->n--;
}

static void recs_clear(sg_ck_alloc *ck) {
    for (int i = 0; i < ck->n; i++) {
        slots[ck->r[i].slot].refs--;
        desc_unref(ck->r[i].d);
    }
    ck->n = 0;
    ck->gen = ck_gen;
}

static sg_ck_alloc *alloc_records(sg_alloc *a) {
    if (a->ck == NULL) {
        a->ck = xcalloc(1, sizeof *a->ck);
        a->ck->gen = ck_gen;
    }
    if (a->ck->gen != ck_gen) recs_clear(a->ck);
    return a->ck;
}

static void alloc_text(char *buf, size_t cap, CUdeviceptr base, const char *entry, size_t size) {
    snprintf(buf, cap, "allocation 0x%llx (%s, %zu bytes)", (unsigned long long)base,
             entry ? entry : "allocated", size);
}

/* An access [lo, hi) of allocation a by the operation d of a stream whose clock is st's. */
static void check_alloc(sg_alloc *a, CUdeviceptr lo, CUdeviceptr hi, unsigned mode,
                        struct sg_ck_stream *st, ck_desc *d) {
    sg_ck_alloc *ck = alloc_records(a);
    for (int i = 0; i < ck->n; i++) {
        ck_rec *r = &ck->r[i];
        if (r->hi <= lo || r->lo >= hi) continue;
        int ordered = r->slot == st->slot || vc_get(&st->vc, r->slot) >= r->val;
        if (!ordered) {
            if (((r->mode | mode) & 2) && r->d != d && pair_first(d->id, r->d->id)) {
                char mine[512], theirs[512], alloc[192];
                desc_text(d, mine, sizeof mine);
                desc_text(r->d, theirs, sizeof theirs);
                alloc_text(alloc, sizeof alloc, a->base, a->entry, a->size);
                report("race: %s %s [0x%llx, +%llu) of %s, not ordered after %s %s [0x%llx, +%llu)", mine,
                       verb(mode), (unsigned long long)lo, (unsigned long long)(hi - lo), alloc, theirs,
                       verb_ing(r->mode), (unsigned long long)r->lo, (unsigned long long)(r->hi - r->lo));
            }
            continue;
        }
        /* Ordered before this access: a write supersedes what it covers, a read the reads
         * it covers (whatever a later access is ordered after, it is ordered after them). */
        if (!(mode & 2) && (r->mode & 2)) continue;
        if (r->lo < lo && r->hi > hi) {
            ck_rec right = *r;
            right.lo = hi;
            r->hi = lo;
            rec_push(ck, &right);
        } else if (r->lo < lo) {
            r->hi = lo;
        } else if (r->hi > hi) {
            r->lo = hi;
        } else {
            rec_remove(ck, i);
            i--;
        }
    }
    ck_rec *last = ck->n > 0 ? &ck->r[ck->n - 1] : NULL;
    if (last != NULL && last->d == d && last->mode == mode && last->hi == lo && last->slot == st->slot) {
        last->hi = hi; /* the next row of the same operation */
    } else {
        ck_rec r = {lo, hi, st->slot, st->tick, (unsigned char)mode, d};
        rec_push(ck, &r);
    }
    while (ck->n > MAX_RECORDS) rec_remove(ck, 0);
}

/* ---- tombstones: freed ranges not allocated again --------------------------------------------------- */

typedef struct {
    CUdeviceptr base;
    size_t size;
    const char *entry;  /* how it was allocated */
    sg_ck_alloc recs;   /* its records, until the free that made it checks them */
    ck_desc *freed_by;  /* NULL until then */
    uint64_t order;
} ck_tomb;
static ck_tomb *tombs; /* sorted by base, disjoint */
static int ntombs, cap_tombs;
static uint64_t next_tomb_order = 1;

static int tomb_index(CUdeviceptr p) { /* the last tomb whose base <= p, or -1 */
    int lo = 0, hi = ntombs - 1, found = -1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (tombs[mid].base <= p) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return found;
}

static ck_tomb *tomb_find(CUdeviceptr p) {
    int i = tomb_index(p);
    return i >= 0 && p < tombs[i].base + tombs[i].size ? &tombs[i] : NULL;
}

static void tomb_remove(int i) {
    recs_clear(&tombs[i].recs);
    free(tombs[i].recs.r);
    desc_unref(tombs[i].freed_by);
    memmove(&tombs[i], &tombs[i + 1], (size_t)(ntombs - i - 1) * sizeof *tombs);
    ntombs--;
}

static void tombs_remove_overlapping(CUdeviceptr base, size_t size) {
    int i = tomb_index(base);
    if (i < 0) i = 0;
    while (i < ntombs && tombs[i].base < base + size) {
        if (tombs[i].base + tombs[i].size > base)
            tomb_remove(i);
        else
            i++;
    }
}

static void tombs_clear(void) {
    while (ntombs > 0) tomb_remove(ntombs - 1);
}

static ck_tomb *tomb_add(CUdeviceptr base, size_t size, const char *entry) {
    tombs_remove_overlapping(base, size);
    if (ntombs == MAX_TOMBS) { /* forget the oldest */
        int oldest = 0;
        for (int i = 1; i < ntombs; i++)
            if (tombs[i].order < tombs[oldest].order) oldest = i;
        tomb_remove(oldest);
    }
    if (ntombs == cap_tombs) {
        cap_tombs = cap_tombs ? cap_tombs * 2 : 64;
        tombs = xrealloc(tombs, (size_t)cap_tombs * sizeof *tombs);
    }
    int i = tomb_index(base) + 1;
    memmove(&tombs[i + 1], &tombs[i], (size_t)(ntombs - i) * sizeof *tombs);
    ntombs++;
    memset(&tombs[i], 0, sizeof tombs[i]);
    tombs[i].base = base;
    tombs[i].size = size;
    tombs[i].entry = entry;
    tombs[i].recs.gen = ck_gen;
    tombs[i].order = next_tomb_order++;
    return &tombs[i];
}

void sg_ck_alloc_added(sg_alloc *a) { tombs_remove_overlapping(a->base, a->size); }

void sg_ck_alloc_removed(sg_alloc *a, int silent) {
    sg_ck_alloc *ck = a->ck;
    a->ck = NULL;
    if (SG_CHECKING() && !silent) {
        ck_tomb *t = tomb_add(a->base, a->size, a->entry);
        if (ck != NULL && ck->gen == ck_gen) {
            t->recs = *ck; /* the free (sg_ck_freed) checks them */
            free(ck);
            ck = NULL;
        }
    }
    if (ck != NULL) {
        recs_clear(ck);
        free(ck->r);
        free(ck);
    }
}

void sg_ck_freed(CUdeviceptr base, sg_stream *s) {
    int i = tomb_index(base);
    if (i < 0 || tombs[i].base != base) return;
    ck_tomb *t = &tombs[i];
    struct sg_ck_stream *st = s != NULL ? st_get(s) : NULL;
    const sg_vc *clock = st != NULL ? &st->vc : &host_vc;
    ck_desc *d = desc_make(sg_api_name(), NULL, s, NULL);
    if (t->recs.gen == ck_gen) {
        for (int k = 0; k < t->recs.n; k++) {
            ck_rec *r = &t->recs.r[k];
            int ordered = (st != NULL && r->slot == st->slot) || vc_get(clock, r->slot) >= r->val;
            if (ordered || !pair_first(d->id, r->d->id)) continue;
            char mine[512], theirs[512], alloc[192];
            desc_text(d, mine, sizeof mine);
            desc_text(r->d, theirs, sizeof theirs);
            alloc_text(alloc, sizeof alloc, t->base, t->entry, t->size);
            report("free while in use: %s frees %s, not ordered after %s %s [0x%llx, +%llu)", mine, alloc,
                   theirs, verb_ing(r->mode), (unsigned long long)r->lo, (unsigned long long)(r->hi - r->lo));
        }
    }
    recs_clear(&t->recs);
    desc_unref(t->freed_by);
    t->freed_by = d;
}

static void report_use_after_free(ck_desc *d, unsigned mode, CUdeviceptr lo, CUdeviceptr hi, ck_tomb *t) {
    if (!pair_first(d->id, t->freed_by ? t->freed_by->id : (t->order | (1ULL << 63)))) return;
    char mine[512], freer[512], alloc[192];
    desc_text(d, mine, sizeof mine);
    if (t->freed_by != NULL)
        desc_text(t->freed_by, freer, sizeof freer);
    else
        snprintf(freer, sizeof freer, "a driver call");
    alloc_text(alloc, sizeof alloc, t->base, t->entry, t->size);
    report("use after free: %s %s [0x%llx, +%llu) of freed %s, freed by %s", mine, verb(mode),
           (unsigned long long)lo, (unsigned long long)(hi - lo), alloc, freer);
}

/* ---- operations ------------------------------------------------------------------------------------ */

static void check_accesses(sg_stream *s, struct sg_ck_stream *st, sg_op *op) {
    ck_desc *d = NULL;
    for (int i = 0; i < op->ck_nranges; i++) {
        sg_ck_range *r = &op->ck_ranges[i];
        if (r->len == 0 || r->mode == 0) continue;
        if (d == NULL)
            d = desc_make(op->ck_entry, op->ck_replay ? sg_api_name() : NULL, s,
                          op->type == OP_KERNEL ? sg_kernel_name(op->u.kernel.index) : NULL);
        CUdeviceptr lo = r->lo, hi = r->lo + r->len;
        sg_alloc *a = sg_alloc_find(lo);
        if (a != NULL) {
            if (hi > a->base + a->size) hi = a->base + a->size;
            check_alloc(a, lo, hi, r->mode, st, d);
        } else {
            ck_tomb *t = tomb_find(lo);
            if (t != NULL) report_use_after_free(d, r->mode, lo, hi, t);
        }
    }
    desc_unref(d);
}

void sg_ck_enqueue(sg_stream *s, sg_op *op) {
    struct sg_ck_stream *st = st_get(s);
    if (st->host_seen != host_version) {
        vc_join(&st->vc, &host_vc);
        st->host_seen = host_version;
    }
    sg_ctx *c = s->ctx;
    if (s->kind == SK_LEGACY) {
        /* The legacy stream's implicit synchronisation, whether that work has run or not. */
        for (int i = 0; i < c->nstreams; i++) {
            sg_stream *t = c->streams[i];
            if (t == s || (t->flags & SG_STREAM_NON_BLOCKING) || st_clock(t) == NULL) continue;
            struct sg_ck_stream *tt = t->ck;
            if (tt->into_slot == st->slot && tt->into_tick == tt->tick) continue; /* joined as is */
            vc_join(&st->vc, &tt->vc);
            tt->into_slot = st->slot;
            tt->into_tick = tt->tick;
        }
    } else if (!(s->flags & SG_STREAM_NON_BLOCKING) && c->legacy != NULL && c->legacy != s &&
               st_clock(c->legacy) != NULL) {
        struct sg_ck_stream *lt = c->legacy->ck;
        if (st->legacy_slot != lt->slot || st->legacy_tick != lt->tick) {
            vc_join(&st->vc, &lt->vc);
            st->legacy_slot = lt->slot;
            st->legacy_tick = lt->tick;
        }
    }
    if (op->ck_join != NULL) vc_join(&st->vc, op->ck_join);
    st->tick++;
    vc_set(&st->vc, st->slot, st->tick);
    if (op->ck_entry == NULL) op->ck_entry = sg_api_name();
    if (op->ck_nranges > 0) check_accesses(s, st, op);
}

/* ---- the ranges an operation accesses (recorded when it is built) ------------------------------------ */

static void add_range(sg_op *op, CUdeviceptr lo, size_t len, unsigned mode, int merge) {
    if (len == 0 || mode == 0) return;
    if (merge && op->ck_nranges > 0) {
        sg_ck_range *last = &op->ck_ranges[op->ck_nranges - 1];
        if (last->mode == mode && last->lo + last->len == lo) {
            last->len += len;
            return;
        }
    }
    int n = op->ck_nranges;
    if ((n & (n - 1)) == 0) /* 0, 1, 2, 4, ...: grow to the next power of two */
        op->ck_ranges = xrealloc(op->ck_ranges, (size_t)(n ? n * 2 : 2) * sizeof *op->ck_ranges);
    op->ck_ranges[n].lo = lo;
    op->ck_ranges[n].len = len;
    op->ck_ranges[n].mode = mode;
    op->ck_nranges = n + 1;
}

/* The rows of a pitched region, each its own range (contiguous rows merge); past MAX_ROWS
 * ranges, the bounding span stands in for them. */
static void add_box(sg_op *op, CUdeviceptr addr, size_t pitch, size_t slice, size_t width, size_t height,
                    size_t depth, unsigned mode) {
    if (width == 0 || height == 0 || depth == 0) return;
    size_t pieces = pitch == width ? (slice == width * height ? 1 : depth) : height * depth;
    if (pieces > MAX_ROWS) {
        add_range(op, addr, (depth - 1) * slice + (height - 1) * pitch + width, mode, 0);
        return;
    }
    int first = 1;
    for (size_t z = 0; z < depth; z++)
        for (size_t y = 0; y < height; y++) {
            add_range(op, addr + z * slice + y * pitch, width, mode, !first);
            first = 0;
        }
}

void sg_ck_copy_ranges(sg_op *op, CUdeviceptr dst, int dst_known, size_t dst_pitch, size_t dst_slice,
                       CUdeviceptr src, int src_known, size_t src_pitch, size_t src_slice, size_t width,
                       size_t height, size_t depth) {
    if (src_known) add_box(op, src, src_pitch, src_slice, width, height, depth, 1);
    if (dst_known) add_box(op, dst, dst_pitch, dst_slice, width, height, depth, 2);
}

void sg_ck_memset_ranges(sg_op *op, CUdeviceptr dst, size_t pitch, size_t width_bytes, size_t height) {
    add_box(op, dst, pitch, pitch * height, width_bytes, height, 1, 2);
}

/* Declared accesses of kernel parameters (simgpu_set_kernel_param_access). */
typedef struct kdecl {
    struct kdecl *next;
    char *name;
    int index, mode;
} kdecl;
static kdecl *kdecls;

static int param_mode(const char *kernel, int index) {
    for (kdecl *k = kdecls; k != NULL; k = k->next)
        if (k->index == index && strcmp(k->name, kernel) == 0) return k->mode;
    return 3; /* a pointer does not say how far a kernel reads or writes */
}

static void kernel_pointer(sg_op *op, const char *kernel, int index, uint64_t value) {
    if (value == 0) return;
    int mode = param_mode(kernel, index);
    if (mode == 0) return;
    sg_alloc *a = sg_alloc_find(value);
    if (a != NULL) {
        add_range(op, a->base, a->size, (unsigned)mode, 0);
        return;
    }
    ck_tomb *t = tomb_find(value);
    if (t != NULL) add_range(op, t->base, t->size, (unsigned)mode, 0);
}

void sg_ck_kernel_ranges(sg_op *op, const char *kernel, const unsigned char *params, size_t size,
                         int nparams, const size_t *offsets, const size_t *sizes) {
    if (params == NULL) return;
    uint64_t v;
    if (nparams >= 0) {
        for (int i = 0; i < nparams; i++) {
            if (sizes[i] != 8 || offsets[i] + 8 > size) continue;
            memcpy(&v, params + offsets[i], 8);
            kernel_pointer(op, kernel, i, v);
        }
    } else {
        /* An `extra` buffer of a kernel whose parameter list is unknown: every aligned
         * 8-byte word, numbered from 0, may be a pointer. */
        for (size_t w = 0; (w + 1) * 8 <= size; w++) {
            memcpy(&v, params + w * 8, 8);
            kernel_pointer(op, kernel, (int)w, v);
        }
    }
}

/* ---- exports ------------------------------------------------------------------------------------------- */

int sg_check_mode_from_env(const char *text) {
    if (text == NULL || *text == '\0' || strcmp(text, "0") == 0) return 0;
    if (strcmp(text, "1") == 0) return 1;
    if (strcmp(text, "abort") == 0) return 2;
    fprintf(stderr, "simgpu: ignoring SIMGPU_CHECK=%s (expected 0, 1 or abort)\n", text);
    return 0;
}

/* Exported for tests: 0 when the checker is off, 1 when it reports, 2 when it aborts at the
 * first report. */
SG_API int simgpu_check_mode(void) {
    sg_load_config();
    return __atomic_load_n(&sg_check_mode, __ATOMIC_RELAXED);
}

/* Exported for tests: sets the checker's mode (0 off, 1 report, 2 abort); returns the
 * previous one (-1: mode refused).  Switching on starts from an empty history: nothing
 * enqueued before is known. */
SG_API int simgpu_set_check(int mode) {
    if (mode < 0 || mode > 2) return -1;
    sg_load_config();
    pthread_mutex_lock(&sg_lock);
    int previous = sg_check_mode;
    if (previous == 0 && mode != 0) {
        ck_gen++;
        vc_reset(&host_vc);
        host_version++;
        if (pairs != NULL) memset(pairs, 0, (size_t)PAIR_CAP * sizeof *pairs);
        npairs = 0;
    }
    if (mode == 0) tombs_clear();
    __atomic_store_n(&sg_check_mode, mode, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&sg_lock);
    return previous;
}

/* Exported for tests: the text of report `index` (0-based, in the order they were made; the
 * last KEEP_REPORTS are kept), NUL-terminated in buffer (at most capacity bytes).  Returns its
 * length (without the NUL; more than capacity - 1 when cut), or 0 when there is none. */
SG_API size_t simgpu_check_report(long index, char *buffer, size_t capacity) {
    size_t n = 0;
    pthread_mutex_lock(&report_lock);
    if (index >= 0 && index < nreports && index >= nreports - KEEP_REPORTS) {
        const char *text = reports[index % KEEP_REPORTS];
        if (text != NULL) {
            n = strlen(text);
            if (buffer != NULL && capacity > 0) {
                size_t m = n < capacity - 1 ? n : capacity - 1;
                memcpy(buffer, text, m);
                buffer[m] = '\0';
            }
        }
    }
    pthread_mutex_unlock(&report_lock);
    return n;
}

/* Exported for tests: how the checker takes parameter `param_index` of kernels named
 * `kernel_name` when it points into an allocation: 0 not accessed, 1 read, 2 written, 3 read
 * and written (the default).  Replaces an earlier declaration; 0, or -1 when refused. */
SG_API int simgpu_set_kernel_param_access(const char *kernel_name, int param_index, int mode) {
    if (kernel_name == NULL || param_index < 0 || mode < 0 || mode > 3) return -1;
    pthread_mutex_lock(&sg_lock);
    kdecl *k = kdecls;
    while (k != NULL && !(k->index == param_index && strcmp(k->name, kernel_name) == 0)) k = k->next;
    if (k == NULL) {
        k = calloc(1, sizeof *k);
        char *name = strdup(kernel_name);
        if (k == NULL || name == NULL) {
            free(k);
            free(name);
            pthread_mutex_unlock(&sg_lock);
            return -1;
        }
        k->name = name;
        k->index = param_index;
        k->next = kdecls;
        kdecls = k;
    }
    k->mode = mode;
    pthread_mutex_unlock(&sg_lock);
    return 0;
}
