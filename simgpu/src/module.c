/* simgpu kernels: modules and libraries accept any image; kernels never run.  A
 * launch is validated, logged (function, grid, block, shared memory, the
 * parameter bytes as the kernel would receive them, stream) and enqueued, and
 * its log entry is marked executed when its stream reaches it.
 *
 * Parameter layouts come from the image when it is PTX text (each .entry's
 * .param list); for other images the function's layout is unknown unless a test
 * declares it (simgpu_set_kernel_params), and only `extra` launches log bytes. */
#include "sim.h"

#include <ctype.h>

void sg_handle_each(int kind, void (*fn)(void *obj, void *arg), void *arg);
void sg_set_ptds(int on);

#define MAX_PARAMS 256

typedef struct {
    char *name;
    int nparams; /* -1: unknown */
    size_t offsets[MAX_PARAMS], sizes[MAX_PARAMS];
    size_t param_bytes;
} kernel_info;

typedef struct {
    kernel_info **k;
    int nk, cap;
    int opaque; /* names not found in the image are accepted */
    int refs;
} image;

typedef struct sg_module {
    sg_obj o;
    uint64_t ctx;
    uint64_t lib; /* the library it was made for, or 0 */
    image *img;
} sg_module;

typedef struct {
    sg_obj o;
    uint64_t module;
    uint64_t kernel; /* the library kernel it came from, or 0 */
    kernel_info *info;
    int max_dynamic_shared;
    int carveout;
    int cache_config;
} sg_func;

typedef struct {
    sg_obj o;
    image *img;
} sg_library;

typedef struct {
    sg_obj o;
    uint64_t lib;
    kernel_info *info;
    int max_dynamic_shared;
} sg_kernel;

/* ---- images ---------------------------------------------------------------------------------- */

static kernel_info *image_add(image *img, const char *name, size_t len) {
    for (int i = 0; i < img->nk; i++)
        if (strlen(img->k[i]->name) == len && strncmp(img->k[i]->name, name, len) == 0) return img->k[i];
    if (img->nk == img->cap) {
        int cap = img->cap ? img->cap * 2 : 8;
        kernel_info **grown = realloc(img->k, (size_t)cap * sizeof *grown);
        if (grown == NULL) return NULL;
        img->k = grown;
        img->cap = cap;
    }
    kernel_info *k = calloc(1, sizeof *k);
    if (k == NULL) return NULL;
    k->name = strndup(name, len);
    k->nparams = -1;
    img->k[img->nk++] = k;
    return k;
}

static void image_release(image *img) {
    if (img == NULL || --img->refs > 0) return;
    for (int i = 0; i < img->nk; i++) {
        free(img->k[i]->name);
        free(img->k[i]);
    }
    free(img->k);
    free(img);
}

/* Declared layouts for kernels of images the simulator cannot read. */
typedef struct declared {
    struct declared *next;
    char *name;
    int nparams;
    size_t sizes[MAX_PARAMS];
} declared;
static declared *declarations;

static void layout_from_sizes(kernel_info *k, int n, const size_t *sizes) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        size_t align = sizes[i] >= 8 ? 8 : sizes[i] >= 4 ? 4 : sizes[i] >= 2 ? 2 : 1;
        off = (off + align - 1) / align * align;
        k->offsets[i] = off;
        k->sizes[i] = sizes[i];
        off += sizes[i];
    }
    k->nparams = n;
    k->param_bytes = off;
}

static void apply_declaration(kernel_info *k) {
    for (declared *d = declarations; d; d = d->next)
        if (strcmp(d->name, k->name) == 0) layout_from_sizes(k, d->nparams, d->sizes);
}

/* Exported for tests: declares the parameter sizes of kernels called `name` in
 * images the simulator cannot parse (cubin, fatbin). */
SG_API int simgpu_set_kernel_params(const char *name, int nparams, const size_t *sizes) {
    if (name == NULL || nparams < 0 || nparams > MAX_PARAMS || (nparams > 0 && sizes == NULL)) return -1;
    declared *d = calloc(1, sizeof *d);
    if (d == NULL) return -1;
    d->name = strdup(name);
    d->nparams = nparams;
    if (nparams) memcpy(d->sizes, sizes, (size_t)nparams * sizeof *sizes);
    pthread_mutex_lock(&sg_lock);
    d->next = declarations;
    declarations = d;
    pthread_mutex_unlock(&sg_lock);
    return 0;
}

static int ptx_type_size(const char *t, size_t len) {
    if (len < 3 || t[0] != '.') return 0;
    char c = t[1];
    if (c != 'u' && c != 's' && c != 'b' && c != 'f') return 0;
    int bits = atoi(t + 2);
    if (bits == 8 || bits == 16 || bits == 32 || bits == 64) return bits / 8;
    return 0;
}

/* Parses one parameter declaration ".param .align 8 .b8 name[16]". */
static int parse_param(const char *p, const char *end, size_t *size, size_t *align) {
    size_t elem = 0, al = 0, count = 1;
    while (p < end) {
        while (p < end && isspace((unsigned char)*p)) p++;
        const char *tok = p;
        while (p < end && !isspace((unsigned char)*p)) p++;
        size_t len = (size_t)(p - tok);
        if (len == 0) break;
        if (len == 6 && strncmp(tok, ".align", 6) == 0) {
            while (p < end && isspace((unsigned char)*p)) p++;
            al = (size_t)strtoul(p, NULL, 10);
            while (p < end && !isspace((unsigned char)*p)) p++;
        } else if (ptx_type_size(tok, len)) {
            elem = (size_t)ptx_type_size(tok, len);
        } else {
            const char *br = memchr(tok, '[', len);
            if (br) count = (size_t)strtoul(br + 1, NULL, 10);
        }
    }
    if (elem == 0) return 0;
    *size = elem * count;
    *align = al ? al : elem;
    return 1;
}

static void parse_ptx(image *img, const char *text, size_t n) {
    /* A copy without comments. */
    char *clean = malloc(n + 1);
    if (clean == NULL) return;
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        if (text[i] == '/' && i + 1 < n && text[i + 1] == '/') {
            while (i < n && text[i] != '\n') i++;
        } else if (text[i] == '/' && i + 1 < n && text[i + 1] == '*') {
            i += 2;
            while (i + 1 < n && !(text[i] == '*' && text[i + 1] == '/')) i++;
            i += 2;
        } else {
            clean[m++] = text[i++];
        }
    }
    clean[m] = '\0';
    if (strstr(text, "simgpu-opaque") != NULL) img->opaque = 1;
    const char *p = clean;
    while ((p = strstr(p, ".entry")) != NULL) {
        if ((p > clean && !isspace((unsigned char)p[-1])) || !isspace((unsigned char)p[6])) {
            p += 6;
            continue;
        }
        p += 6;
        while (isspace((unsigned char)*p)) p++;
        const char *name = p;
        while (*p && (isalnum((unsigned char)*p) || *p == '_' || *p == '$' || *p == '.')) p++;
        size_t len = (size_t)(p - name);
        if (len == 0) continue;
        kernel_info *k = image_add(img, name, len);
        if (k == NULL) break;
        while (isspace((unsigned char)*p)) p++;
        k->nparams = 0;
        k->param_bytes = 0;
        if (*p != '(') continue;
        const char *close = strchr(p, ')');
        if (close == NULL) break;
        const char *q = p + 1;
        size_t off = 0;
        while (q < close && k->nparams < MAX_PARAMS) {
            const char *comma = memchr(q, ',', (size_t)(close - q));
            const char *stop = comma ? comma : close;
            size_t size, align;
            if (parse_param(q, stop, &size, &align)) {
                off = (off + align - 1) / align * align;
                k->offsets[k->nparams] = off;
                k->sizes[k->nparams] = size;
                k->nparams++;
                off += size;
            }
            q = stop + 1;
        }
        k->param_bytes = off;
        p = close + 1;
    }
    free(clean);
}

/* Function names of a cubin: its ".text.<name>" sections. */
static void parse_elf(image *img, const unsigned char *data) {
    if (data[4] != 2) return; /* 64-bit only */
    uint64_t shoff;
    uint16_t shentsize, shnum, shstrndx;
    memcpy(&shoff, data + 0x28, 8);
    memcpy(&shentsize, data + 0x3A, 2);
    memcpy(&shnum, data + 0x3C, 2);
    memcpy(&shstrndx, data + 0x3E, 2);
    if (shentsize < 64 || shnum == 0 || shstrndx >= shnum || shnum > 65000) return;
    const unsigned char *strhdr = data + shoff + (uint64_t)shstrndx * shentsize;
    uint64_t stroff;
    memcpy(&stroff, strhdr + 0x18, 8);
    for (uint16_t i = 0; i < shnum; i++) {
        uint32_t name_off;
        memcpy(&name_off, data + shoff + (uint64_t)i * shentsize, 4);
        const char *name = (const char *)data + stroff + name_off;
        if (strncmp(name, ".text.", 6) == 0) {
            kernel_info *k = image_add(img, name + 6, strlen(name + 6));
            if (k) apply_declaration(k);
        }
    }
}

static image *image_load(const void *data, size_t size_hint) {
    image *img = calloc(1, sizeof *img);
    if (img == NULL) return NULL;
    img->refs = 1;
    const unsigned char *b = data;
    if (b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F') {
        parse_elf(img, b);
        img->opaque = img->nk == 0;
    } else if (b[0] == 0x50 && b[1] == 0xed && b[2] == 0x55 && b[3] == 0xba) {
        img->opaque = 1; /* a fat binary */
    } else {
        size_t n = size_hint ? size_hint : strnlen((const char *)data, 64u << 20);
        if (memmem(data, n, ".entry", 6) != NULL || memmem(data, n, ".version", 8) != NULL)
            parse_ptx(img, data, n);
        else
            img->opaque = 1;
    }
    return img;
}

static kernel_info *image_find(image *img, const char *name) {
    for (int i = 0; i < img->nk; i++)
        if (strcmp(img->k[i]->name, name) == 0) return img->k[i];
    if (!img->opaque) return NULL;
    kernel_info *k = image_add(img, name, strlen(name));
    if (k) apply_declaration(k);
    return k;
}

/* ---- modules ---------------------------------------------------------------------------------- */

static void fill_jit_logs(unsigned n, const int *options, void **values) {
    for (unsigned i = 0; options && values && i < n; i++) {
        if ((options[i] == 3 || options[i] == 5) && values[i] != NULL) {
            /* the log buffer: its size is the value of the matching *_SIZE_BYTES option */
            for (unsigned j = 0; j < n; j++)
                if (options[j] == options[i] + 1 && (uintptr_t)values[j] > 0) ((char *)values[i])[0] = '\0';
        }
    }
}

static CUresult module_new(CUmodule *out, image *img, uint64_t lib) {
    CUresult err = CUDA_SUCCESS;
    sg_ctx *c = sg_current_ctx(&err);
    if (c == NULL) return err;
    sg_module *m = calloc(1, sizeof *m);
    if (m == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
    m->ctx = c->o.h;
    m->lib = lib;
    m->img = img;
    img->refs++;
    sg_handle_new(m, K_MODULE);
    *out = P(m->o.h);
    return CUDA_SUCCESS;
}

static CUresult load_module(CUmodule *out, const void *data, size_t size) {
    if (out == NULL || data == NULL) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sg_lock);
    image *img = image_load(data, size);
    CUresult r = img ? module_new(out, img, 0) : CUDA_ERROR_OUT_OF_MEMORY;
    image_release(img);
    pthread_mutex_unlock(&sg_lock);
    return r;
}

static void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[n] = '\0';
    fclose(f);
    *size = (size_t)(n > 0 ? n : 0);
    return buf;
}

SG_API CUresult cuModuleLoadData(CUmodule *out, const void *image_data) {
    API_BEGIN_ARGS("cuModuleLoadData", LOG_OUT64(0), LA(out), LA(image_data));
    API_NEED_INIT();
    API_RETURN(load_module(out, image_data, 0));
}

SG_API CUresult cuModuleLoadDataEx(CUmodule *out, const void *image_data, unsigned int n,
                                   int *options, void **values) {
    API_BEGIN_ARGS("cuModuleLoadDataEx", LOG_OUT64(0), LA(out), LA(image_data), LA(n), LA(options), LA(values));
    API_NEED_INIT();
    fill_jit_logs(n, options, values);
    API_RETURN(load_module(out, image_data, 0));
}

SG_API CUresult cuModuleLoadFatBinary(CUmodule *out, const void *fatbin) {
    API_BEGIN_ARGS("cuModuleLoadFatBinary", LOG_OUT64(0), LA(out), LA(fatbin));
    API_NEED_INIT();
    API_RETURN(load_module(out, fatbin, 0));
}

SG_API CUresult cuModuleLoad(CUmodule *out, const char *path) {
    API_BEGIN_ARGS("cuModuleLoad", LOG_OUT64(0), LA(out), LA(path));
    API_NEED_INIT();
    if (out == NULL || path == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    size_t size;
    void *data = read_file(path, &size);
    if (data == NULL) API_RETURN(CUDA_ERROR_FILE_NOT_FOUND);
    CUresult r = load_module(out, data, size);
    free(data);
    API_RETURN(r);
}

static void module_free(sg_module *m) {
    sg_handle_drop(m->o.h);
    image_release(m->img);
    free(m);
}

SG_API CUresult cuModuleUnload(CUmodule h) {
    API_BEGIN_ARGS("cuModuleUnload", 0, LA(h));
    API_NEED_INIT();
    pthread_mutex_lock(&sg_lock);
    sg_module *m = sg_handle_get(H(h), K_MODULE);
    if (m != NULL) module_free(m);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

static void drop_func_of_module(void *obj, void *arg) {
    sg_func *f = obj;
    if (f->module == *(uint64_t *)arg) {
        sg_handle_drop(f->o.h);
        free(f);
    }
}

static void drop_module_of_ctx(void *obj, void *arg) {
    sg_module *m = obj;
    if (m->ctx == ((sg_ctx *)arg)->o.h) {
        uint64_t h = m->o.h;
        sg_handle_each(K_FUNC, drop_func_of_module, &h);
        module_free(m);
    }
}

void sg_modules_of_ctx_destroy(sg_ctx *c) { sg_handle_each(K_MODULE, drop_module_of_ctx, c); }

/* One function object per (module, kernel). */
typedef struct {
    uint64_t module;
    kernel_info *info;
    sg_func *found;
} func_search;

static void find_func(void *obj, void *arg) {
    sg_func *f = obj;
    func_search *s = arg;
    if (f->module == s->module && f->info == s->info) s->found = f;
}

static sg_func *func_for(sg_module *m, kernel_info *k, uint64_t kernel) {
    func_search s = {m->o.h, k, NULL};
    sg_handle_each(K_FUNC, find_func, &s);
    if (s.found) return s.found;
    sg_func *f = calloc(1, sizeof *f);
    if (f == NULL) return NULL;
    f->module = m->o.h;
    f->kernel = kernel;
    f->info = k;
    f->max_dynamic_shared = 49152;
    f->carveout = -1;
    sg_handle_new(f, K_FUNC);
    return f;
}

SG_API CUresult cuModuleGetFunction(CUfunction *out, CUmodule h, const char *name) {
    API_BEGIN_ARGS("cuModuleGetFunction", LOG_OUT64(0), LA(out), LA(h), LA(name));
    API_NEED_INIT();
    if (out == NULL || name == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_module *m = sg_handle_get(H(h), K_MODULE);
    CUresult r = CUDA_SUCCESS;
    if (m == NULL) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else {
        kernel_info *k = image_find(m->img, name);
        sg_func *f = k ? func_for(m, k, 0) : NULL;
        if (f == NULL)
            r = CUDA_ERROR_NOT_FOUND;
        else
            *out = P(f->o.h);
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule h) {
    API_BEGIN_ARGS("cuModuleGetFunctionCount", LOG_OUT32(0), LA(count), LA(h));
    API_NEED_INIT();
    if (count == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_module *m = sg_handle_get(H(h), K_MODULE);
    if (m) *count = (unsigned)m->img->nk;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

SG_API CUresult cuModuleEnumerateFunctions(CUfunction *funcs, unsigned int n, CUmodule h) {
    API_BEGIN_ARGS("cuModuleEnumerateFunctions", 0, LA(funcs), LA(n), LA(h));
    API_NEED_INIT();
    if (funcs == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_module *m = sg_handle_get(H(h), K_MODULE);
    CUresult r = m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    for (unsigned i = 0; m && i < n && i < (unsigned)m->img->nk; i++) {
        sg_func *f = func_for(m, m->img->k[i], 0);
        funcs[i] = f ? P(f->o.h) : NULL;
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *size, CUmodule h, const char *name) {
    API_BEGIN_ARGS("cuModuleGetGlobal_v2", LOG_OUT64(0) | LOG_OUT64(1), LA(dptr), LA(size), LA(h), LA(name));
    API_NEED_INIT();
    (void)dptr;
    (void)size;
    if (name == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_module *m = sg_handle_get(H(h), K_MODULE);
    pthread_mutex_unlock(&sg_lock);
    /* Module globals are not simulated. */
    API_RETURN(m ? CUDA_ERROR_NOT_FOUND : CUDA_ERROR_INVALID_HANDLE);
}

SG_API CUresult cuModuleGetLoadingMode(int *mode) {
    API_BEGIN_ARGS("cuModuleGetLoadingMode", LOG_OUT32(0), LA(mode));
    API_NEED_INIT();
    if (mode == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    *mode = 1; /* eager */
    API_RETURN(CUDA_SUCCESS);
}

/* ---- libraries and kernels --------------------------------------------------------------------- */

static CUresult load_library(CUlibrary *out, const void *data, size_t size) {
    if (out == NULL || data == NULL) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sg_lock);
    sg_library *l = calloc(1, sizeof *l);
    image *img = l ? image_load(data, size) : NULL;
    CUresult r = CUDA_SUCCESS;
    if (img == NULL) {
        free(l);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        l->img = img;
        sg_handle_new(l, K_LIB);
        *out = P(l->o.h);
    }
    pthread_mutex_unlock(&sg_lock);
    return r;
}

SG_API CUresult cuLibraryLoadData(CUlibrary *out, const void *code, int *jit_options,
                                  void **jit_values, unsigned int njit, int *lib_options,
                                  void **lib_values, unsigned int nlib) {
    API_BEGIN_ARGS("cuLibraryLoadData", LOG_OUT64(0), LA(out), LA(code), LA(jit_options), LA(jit_values), LA(njit), LA(lib_options));
    API_NEED_INIT();
    (void)lib_options;
    (void)lib_values;
    (void)nlib;
    fill_jit_logs(njit, jit_options, jit_values);
    API_RETURN(load_library(out, code, 0));
}

SG_API CUresult cuLibraryLoadFromFile(CUlibrary *out, const char *path, int *jit_options,
                                      void **jit_values, unsigned int njit, int *lib_options,
                                      void **lib_values, unsigned int nlib) {
    API_BEGIN_ARGS("cuLibraryLoadFromFile", LOG_OUT64(0), LA(out), LA(path), LA(jit_options), LA(jit_values), LA(njit), LA(lib_options));
    API_NEED_INIT();
    (void)lib_options;
    (void)lib_values;
    (void)nlib;
    if (path == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    fill_jit_logs(njit, jit_options, jit_values);
    size_t size;
    void *data = read_file(path, &size);
    if (data == NULL) API_RETURN(CUDA_ERROR_FILE_NOT_FOUND);
    CUresult r = load_library(out, data, size);
    free(data);
    API_RETURN(r);
}

static void drop_kernel_of_lib(void *obj, void *arg) {
    sg_kernel *k = obj;
    if (k->lib == *(uint64_t *)arg) {
        sg_handle_drop(k->o.h);
        free(k);
    }
}

static void drop_module_of_lib(void *obj, void *arg) {
    sg_module *m = obj;
    if (m->lib == *(uint64_t *)arg) {
        uint64_t h = m->o.h;
        sg_handle_each(K_FUNC, drop_func_of_module, &h);
        module_free(m);
    }
}

SG_API CUresult cuLibraryUnload(CUlibrary h) {
    API_BEGIN_ARGS("cuLibraryUnload", 0, LA(h));
    API_NEED_INIT();
    pthread_mutex_lock(&sg_lock);
    sg_library *l = sg_handle_get(H(h), K_LIB);
    if (l != NULL) {
        uint64_t lh = l->o.h;
        sg_handle_each(K_KERNEL, drop_kernel_of_lib, &lh);
        sg_handle_each(K_MODULE, drop_module_of_lib, &lh);
        sg_handle_drop(lh);
        image_release(l->img);
        free(l);
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(l ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

typedef struct {
    uint64_t lib;
    kernel_info *info;
    sg_kernel *found;
} kernel_search;

static void find_kernel(void *obj, void *arg) {
    sg_kernel *k = obj;
    kernel_search *s = arg;
    if (k->lib == s->lib && k->info == s->info) s->found = k;
}

static sg_kernel *kernel_for(sg_library *l, kernel_info *info) {
    kernel_search s = {l->o.h, info, NULL};
    sg_handle_each(K_KERNEL, find_kernel, &s);
    if (s.found) return s.found;
    sg_kernel *k = calloc(1, sizeof *k);
    if (k == NULL) return NULL;
    k->lib = l->o.h;
    k->info = info;
    k->max_dynamic_shared = 49152;
    sg_handle_new(k, K_KERNEL);
    return k;
}

SG_API CUresult cuLibraryGetKernel(CUkernel *out, CUlibrary h, const char *name) {
    API_BEGIN_ARGS("cuLibraryGetKernel", LOG_OUT64(0), LA(out), LA(h), LA(name));
    API_NEED_INIT();
    if (out == NULL || name == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_library *l = sg_handle_get(H(h), K_LIB);
    CUresult r = CUDA_SUCCESS;
    if (l == NULL) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else {
        kernel_info *info = image_find(l->img, name);
        sg_kernel *k = info ? kernel_for(l, info) : NULL;
        if (k == NULL)
            r = CUDA_ERROR_NOT_FOUND;
        else
            *out = P(k->o.h);
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(r);
}

SG_API CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary h) {
    API_BEGIN_ARGS("cuLibraryGetKernelCount", LOG_OUT32(0), LA(count), LA(h));
    API_NEED_INIT();
    if (count == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_library *l = sg_handle_get(H(h), K_LIB);
    if (l) *count = (unsigned)l->img->nk;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(l ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

SG_API CUresult cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int n, CUlibrary h) {
    API_BEGIN_ARGS("cuLibraryEnumerateKernels", 0, LA(kernels), LA(n), LA(h));
    API_NEED_INIT();
    if (kernels == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_library *l = sg_handle_get(H(h), K_LIB);
    for (unsigned i = 0; l && i < n && i < (unsigned)l->img->nk; i++) {
        sg_kernel *k = kernel_for(l, l->img->k[i]);
        kernels[i] = k ? P(k->o.h) : NULL;
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(l ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

typedef struct {
    uint64_t lib, ctx;
    sg_module *found;
} lib_module_search;

static void find_lib_module(void *obj, void *arg) {
    sg_module *m = obj;
    lib_module_search *s = arg;
    if (m->lib == s->lib && m->ctx == s->ctx) s->found = m;
}

/* The library's module in the current context, loaded on first use. */
static sg_module *library_module(sg_library *l, CUresult *err) {
    sg_ctx *c = sg_current_ctx(err);
    if (c == NULL) return NULL;
    lib_module_search s = {l->o.h, c->o.h, NULL};
    sg_handle_each(K_MODULE, find_lib_module, &s);
    if (s.found) return s.found;
    CUmodule h;
    *err = module_new(&h, l->img, l->o.h);
    return *err == CUDA_SUCCESS ? sg_handle_get(H(h), K_MODULE) : NULL;
}

SG_API CUresult cuLibraryGetModule(CUmodule *out, CUlibrary h) {
    API_BEGIN_ARGS("cuLibraryGetModule", LOG_OUT64(0), LA(out), LA(h));
    API_NEED_INIT();
    if (out == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_library *l = sg_handle_get(H(h), K_LIB);
    sg_module *m = l ? library_module(l, &err) : NULL;
    if (l == NULL) err = CUDA_ERROR_INVALID_HANDLE;
    if (m) *out = P(m->o.h);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(m ? CUDA_SUCCESS : err);
}

SG_API CUresult cuKernelGetFunction(CUfunction *out, CUkernel h) {
    API_BEGIN_ARGS("cuKernelGetFunction", LOG_OUT64(0), LA(out), LA(h));
    API_NEED_INIT();
    if (out == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    sg_kernel *k = sg_handle_get(H(h), K_KERNEL);
    sg_library *l = k ? sg_handle_get(k->lib, K_LIB) : NULL;
    sg_module *m = l ? library_module(l, &err) : NULL;
    sg_func *f = m ? func_for(m, k->info, k->o.h) : NULL;
    if (k == NULL || l == NULL) err = CUDA_ERROR_INVALID_HANDLE;
    if (f) *out = P(f->o.h);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(f ? CUDA_SUCCESS : err);
}

SG_API CUresult cuKernelGetLibrary(CUlibrary *out, CUkernel h) {
    API_BEGIN_ARGS("cuKernelGetLibrary", LOG_OUT64(0), LA(out), LA(h));
    API_NEED_INIT();
    if (out == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_kernel *k = sg_handle_get(H(h), K_KERNEL);
    if (k) *out = P(k->lib);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(k ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

/* A launchable object (function or kernel): its layout and shared-memory limit. */
typedef struct {
    kernel_info *info;
    int *max_dynamic_shared;
    uint64_t module_ctx; /* 0 for a kernel: usable in any context */
    uint64_t module;
} callable;

static int callable_get(uint64_t h, callable *c) {
    sg_func *f = sg_handle_get(h, K_FUNC);
    if (f != NULL) {
        sg_module *m = sg_handle_get(f->module, K_MODULE);
        if (m == NULL) return 0;
        c->info = f->info;
        c->max_dynamic_shared = &f->max_dynamic_shared;
        c->module_ctx = m->ctx;
        c->module = m->o.h;
        return 1;
    }
    sg_kernel *k = sg_handle_get(h, K_KERNEL);
    if (k != NULL) {
        c->info = k->info;
        c->max_dynamic_shared = &k->max_dynamic_shared;
        c->module_ctx = 0;
        c->module = 0;
        return 1;
    }
    return 0;
}

SG_API CUresult cuKernelGetName(const char **name, CUkernel h) {
    API_BEGIN_ARGS("cuKernelGetName", LOG_OUT64(0), LA(name), LA(h));
    API_NEED_INIT();
    if (name == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_kernel *k = sg_handle_get(H(h), K_KERNEL);
    if (k) *name = k->info->name;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(k ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

SG_API CUresult cuFuncGetName(const char **name, CUfunction h) {
    API_BEGIN_ARGS("cuFuncGetName", LOG_OUT64(0), LA(name), LA(h));
    API_NEED_INIT();
    if (name == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    callable c;
    int ok = callable_get(H(h), &c);
    if (ok) *name = c.info->name;
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

static CUresult param_info(uint64_t h, size_t index, size_t *offset, size_t *size) {
    pthread_mutex_lock(&sg_lock);
    callable c;
    CUresult r = CUDA_SUCCESS;
    if (!callable_get(h, &c))
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (c.info->nparams < 0)
        r = CUDA_ERROR_NOT_SUPPORTED;
    else if (index >= (size_t)c.info->nparams)
        r = CUDA_ERROR_INVALID_VALUE;
    else {
        if (offset) *offset = c.info->offsets[index];
        if (size) *size = c.info->sizes[index];
    }
    pthread_mutex_unlock(&sg_lock);
    return r;
}

SG_API CUresult cuKernelGetParamInfo(CUkernel h, size_t index, size_t *offset, size_t *size) {
    API_BEGIN_ARGS("cuKernelGetParamInfo", LOG_OUT64(2) | LOG_OUT64(3), LA(h), LA(index), LA(offset), LA(size));
    API_NEED_INIT();
    API_RETURN(param_info(H(h), index, offset, size));
}

SG_API CUresult cuFuncGetParamInfo(CUfunction h, size_t index, size_t *offset, size_t *size) {
    API_BEGIN_ARGS("cuFuncGetParamInfo", LOG_OUT64(2) | LOG_OUT64(3), LA(h), LA(index), LA(offset), LA(size));
    API_NEED_INIT();
    API_RETURN(param_info(H(h), index, offset, size));
}

static CUresult param_count(uint64_t h, size_t *count) {
    if (count == NULL) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sg_lock);
    callable c;
    CUresult r = CUDA_SUCCESS;
    if (!callable_get(h, &c))
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (c.info->nparams < 0)
        r = CUDA_ERROR_NOT_SUPPORTED;
    else
        *count = (size_t)c.info->nparams;
    pthread_mutex_unlock(&sg_lock);
    return r;
}

SG_API CUresult cuKernelGetParamCount(CUkernel h, size_t *count) {
    API_BEGIN_ARGS("cuKernelGetParamCount", LOG_OUT64(1), LA(h), LA(count));
    API_NEED_INIT();
    API_RETURN(param_count(H(h), count));
}

SG_API CUresult cuFuncGetParamCount(CUfunction h, size_t *count) {
    API_BEGIN_ARGS("cuFuncGetParamCount", LOG_OUT64(1), LA(h), LA(count));
    API_NEED_INIT();
    API_RETURN(param_count(H(h), count));
}

static CUresult func_attribute(int *value, int attr, uint64_t h) {
    if (value == NULL) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sg_lock);
    callable c;
    CUresult r = CUDA_SUCCESS;
    if (!callable_get(h, &c)) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else {
        switch (attr) {
        case 0: *value = 1024; break;                  /* max threads per block */
        case 1: case 2: case 3: *value = 0; break;     /* static shared, const, local bytes */
        case 4: *value = 32; break;                    /* registers */
        case 5: case 6: *value = 90; break;            /* PTX and binary versions */
        case 7: *value = 0; break;
        case 8: *value = *c.max_dynamic_shared; break;
        case 9: *value = -1; break;
        case 10: case 11: case 12: case 13: case 14: case 15: *value = 0; break;
        default: r = CUDA_ERROR_INVALID_VALUE;
        }
    }
    pthread_mutex_unlock(&sg_lock);
    return r;
}

static CUresult func_set_attribute(uint64_t h, int attr, int value) {
    pthread_mutex_lock(&sg_lock);
    callable c;
    CUresult r = CUDA_SUCCESS;
    if (!callable_get(h, &c)) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else if (attr == 8) {
        if (value < 0 || value > 232448) r = CUDA_ERROR_INVALID_VALUE;
        else *c.max_dynamic_shared = value;
    } else if (attr == 9) {
        if (value < -1 || value > 100) r = CUDA_ERROR_INVALID_VALUE;
    } else if (attr < 10 || attr > 15) {
        r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&sg_lock);
    return r;
}

SG_API CUresult cuFuncGetAttribute(int *value, int attr, CUfunction h) {
    API_BEGIN_ARGS("cuFuncGetAttribute", LOG_OUT32(0), LA(value), LA(attr), LA(h));
    API_NEED_INIT();
    API_RETURN(func_attribute(value, attr, H(h)));
}

SG_API CUresult cuFuncSetAttribute(CUfunction h, int attr, int value) {
    API_BEGIN_ARGS("cuFuncSetAttribute", 0, LA(h), LA(attr), LA(value));
    API_NEED_INIT();
    API_RETURN(func_set_attribute(H(h), attr, value));
}

SG_API CUresult cuKernelGetAttribute(int *value, int attr, CUkernel h, CUdevice dev) {
    API_BEGIN_ARGS("cuKernelGetAttribute", LOG_OUT32(0), LA(value), LA(attr), LA(h), LA(dev));
    API_NEED_INIT();
    if (!sg_device_valid(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    API_RETURN(func_attribute(value, attr, H(h)));
}

SG_API CUresult cuKernelSetAttribute(int attr, int value, CUkernel h, CUdevice dev) {
    API_BEGIN_ARGS("cuKernelSetAttribute", 0, LA(attr), LA(value), LA(h), LA(dev));
    API_NEED_INIT();
    if (!sg_device_valid(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    API_RETURN(func_set_attribute(H(h), attr, value));
}

SG_API CUresult cuFuncSetCacheConfig(CUfunction h, int config) {
    API_BEGIN_ARGS("cuFuncSetCacheConfig", 0, LA(h), LA(config));
    API_NEED_INIT();
    callable c;
    pthread_mutex_lock(&sg_lock);
    int ok = callable_get(H(h), &c);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(!ok ? CUDA_ERROR_INVALID_HANDLE : config < 0 || config > 3 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
}

SG_API CUresult cuKernelSetCacheConfig(CUkernel h, int config, CUdevice dev) {
    API_BEGIN_ARGS("cuKernelSetCacheConfig", 0, LA(h), LA(config), LA(dev));
    API_NEED_INIT();
    if (!sg_device_valid(dev)) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    callable c;
    pthread_mutex_lock(&sg_lock);
    int ok = callable_get(H(h), &c);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(!ok ? CUDA_ERROR_INVALID_HANDLE : config < 0 || config > 3 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
}

SG_API CUresult cuFuncGetModule(CUmodule *out, CUfunction h) {
    API_BEGIN_ARGS("cuFuncGetModule", LOG_OUT64(0), LA(out), LA(h));
    API_NEED_INIT();
    if (out == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_func *f = sg_handle_get(H(h), K_FUNC);
    if (f) *out = P(f->module);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

SG_API CUresult cuFuncIsLoaded(int *state, CUfunction h) {
    API_BEGIN_ARGS("cuFuncIsLoaded", LOG_OUT32(0), LA(state), LA(h));
    API_NEED_INIT();
    if (state == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    callable c;
    pthread_mutex_lock(&sg_lock);
    int ok = callable_get(H(h), &c);
    pthread_mutex_unlock(&sg_lock);
    if (ok) *state = 1; /* loaded */
    API_RETURN(ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

SG_API CUresult cuFuncLoad(CUfunction h) {
    API_BEGIN_ARGS("cuFuncLoad", 0, LA(h));
    API_NEED_INIT();
    callable c;
    pthread_mutex_lock(&sg_lock);
    int ok = callable_get(H(h), &c);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

/* Occupancy of a Hopper-class multiprocessor (the device attributes' numbers): 2048 threads,
 * 32 blocks, 233472 bytes of shared memory of which each block reserves 1024, at most 232448
 * bytes of dynamic shared memory per block; kernels use no static shared memory. */
enum { SM_THREADS = 2048, SM_BLOCKS = 32, SM_SHARED = 233472, BLOCK_RESERVED = 1024,
       BLOCK_SHARED_MAX = 232448, SM_COUNT = 132, CLUSTER_PORTABLE_MAX = 8 };

static int blocks_per_sm(int block, size_t smem) {
    if (smem > BLOCK_SHARED_MAX) return 0;
    int by_threads = SM_THREADS / block;
    int by_smem = (int)(SM_SHARED / (smem + BLOCK_RESERVED));
    int n = by_threads < by_smem ? by_threads : by_smem;
    return n < SM_BLOCKS ? n : SM_BLOCKS;
}

/* Checks the function handle; *max_dynamic (when asked) gets the dynamic shared memory the
 * function may use (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: 48 KiB unless raised). */
static CUresult occupancy_function_limit(CUfunction h, size_t *max_dynamic) {
    callable c;
    pthread_mutex_lock(&sg_lock);
    int ok = callable_get(H(h), &c);
    if (ok && max_dynamic) *max_dynamic = (size_t)*c.max_dynamic_shared;
    pthread_mutex_unlock(&sg_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult occupancy_function(CUfunction h) { return occupancy_function_limit(h, NULL); }

static CUresult max_active_blocks(int *n, CUfunction h, int block, size_t smem, unsigned flags) {
    if (n == NULL || block <= 0 || block > 1024 || (flags & ~1u)) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = occupancy_function(h);
    if (r == CUDA_SUCCESS) *n = blocks_per_sm(block, smem);
    return r;
}

SG_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction h, int block,
                                                            size_t smem) {
    API_BEGIN_ARGS("cuOccupancyMaxActiveBlocksPerMultiprocessor", LOG_OUT32(0), LA(n), LA(h), LA(block), LA(smem));
    API_NEED_INIT();
    API_RETURN(max_active_blocks(n, h, block, smem, 0));
}

SG_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, CUfunction h, int block,
                                                                     size_t smem, unsigned flags) {
    API_BEGIN_ARGS("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", LOG_OUT32(0), LA(n), LA(h), LA(block), LA(smem), LA(flags));
    API_NEED_INIT();
    API_RETURN(max_active_blocks(n, h, block, smem, flags));
}

/* The block size (a multiple of the warp size, at most `limit` when given) with the most
 * resident threads per multiprocessor, the largest such on a tie; `to_smem` (when given)
 * tells each block size's dynamic shared memory, else `smem` is used for all. */
static CUresult potential_block_size(int *min_grid, int *block, CUfunction h, size_t (*to_smem)(int),
                                     size_t smem, int limit, unsigned flags) {
    if (min_grid == NULL || block == NULL || (flags & ~1u)) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = occupancy_function(h);
    if (r != CUDA_SUCCESS) return r;
    int top = limit > 0 && limit < 1024 ? limit : 1024;
    int best = 0, best_blocks = 0, best_threads = 0;
    for (int size = 32; size <= top; size += 32) {
        int n = blocks_per_sm(size, to_smem ? to_smem(size) : smem);
        if (n * size >= best_threads && n > 0) {
            best = size;
            best_blocks = n;
            best_threads = n * size;
        }
    }
    *block = best;
    *min_grid = best_blocks * SM_COUNT;
    return CUDA_SUCCESS;
}

SG_API CUresult cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block, CUfunction h,
                                                 size_t (*to_smem)(int), size_t smem, int limit) {
    API_BEGIN_ARGS("cuOccupancyMaxPotentialBlockSize", LOG_OUT32(0) | LOG_OUT32(1), LA(min_grid), LA(block), LA(h), LA(to_smem), LA(smem), LA(limit));
    API_NEED_INIT();
    API_RETURN(potential_block_size(min_grid, block, h, to_smem, smem, limit, 0));
}

SG_API CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *min_grid, int *block, CUfunction h,
                                                          size_t (*to_smem)(int), size_t smem,
                                                          int limit, unsigned flags) {
    API_BEGIN_ARGS("cuOccupancyMaxPotentialBlockSizeWithFlags", LOG_OUT32(0) | LOG_OUT32(1), LA(min_grid), LA(block), LA(h), LA(to_smem), LA(smem), LA(limit));
    API_NEED_INIT();
    API_RETURN(potential_block_size(min_grid, block, h, to_smem, smem, limit, flags));
}

/* The dynamic shared memory each block may use with `blocks` of `block` threads resident on
 * one multiprocessor (0 when that many cannot be resident at all), at most what the function
 * may use. */
SG_API CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *bytes, CUfunction h, int blocks,
                                                        int block) {
    API_BEGIN_ARGS("cuOccupancyAvailableDynamicSMemPerBlock", LOG_OUT64(0), LA(bytes), LA(h), LA(blocks), LA(block));
    API_NEED_INIT();
    if (bytes == NULL || blocks <= 0 || block <= 0 || block > 1024) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    size_t limit = BLOCK_SHARED_MAX;
    CUresult r = occupancy_function_limit(h, &limit);
    if (r != CUDA_SUCCESS) API_RETURN(r);
    size_t share = SM_SHARED / (size_t)blocks;
    if (blocks > SM_BLOCKS || (long long)blocks * block > SM_THREADS || share <= BLOCK_RESERVED)
        *bytes = 0;
    else
        *bytes = share - BLOCK_RESERVED < limit ? share - BLOCK_RESERVED : limit;
    API_RETURN(CUDA_SUCCESS);
}

/* The cluster dimensions a launch configuration asks for (1x1x1 without the attribute). */
/* The configuration's cluster dimensions (1, 1, 1 without the attribute; *given says
 * whether it had one). */
static CUresult config_cluster(const sg_launch_config *cfg, unsigned cluster[3], int *given) {
    cluster[0] = cluster[1] = cluster[2] = 1;
    *given = 0;
    if (cfg == NULL || (cfg->num_attrs > 0 && cfg->attrs == NULL)) return CUDA_ERROR_INVALID_VALUE;
    const unsigned *b = cfg->block;
    if (b[0] == 0 || b[1] == 0 || b[2] == 0 || (unsigned long long)b[0] * b[1] * b[2] > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < cfg->num_attrs; i++) {
        if (cfg->attrs[i].id == 4) {
            memcpy(cluster, cfg->attrs[i].value, 3 * sizeof(unsigned));
            *given = 1;
        }
    }
    if (cluster[0] == 0 || cluster[1] == 0 || cluster[2] == 0) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* The largest portable cluster (8 blocks on compute capability 9.0); the configuration's own
 * cluster dimensions are ignored, as the driver documents. */
SG_API CUresult cuOccupancyMaxPotentialClusterSize(int *size, CUfunction h, const sg_launch_config *cfg) {
    API_BEGIN_ARGS("cuOccupancyMaxPotentialClusterSize", LOG_OUT32(0), LA(size), LA(h), LA(cfg));
    API_NEED_INIT();
    unsigned cluster[3];
    int given;
    if (size == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult r = config_cluster(cfg, cluster, &given);
    if (r == CUDA_SUCCESS) r = occupancy_function(h);
    if (r != CUDA_SUCCESS) API_RETURN(r);
    unsigned threads = cfg->block[0] * cfg->block[1] * cfg->block[2];
    int n = blocks_per_sm((int)threads, cfg->shared_bytes);
    *size = n > 0 ? CLUSTER_PORTABLE_MAX : 0;
    API_RETURN(CUDA_SUCCESS);
}

/* How many clusters of the configuration's size fit on the device at once: the blocks resident
 * on all multiprocessors, whole clusters of them (a cluster above the portable size is
 * CUDA_ERROR_INVALID_CLUSTER_SIZE).  A configuration without a cluster-dimension attribute
 * launches no clusters: 0 (driver 580 on an H200 answered CUDA_SUCCESS and 0 for one with no
 * attributes, grid 128, block 64). */
SG_API CUresult cuOccupancyMaxActiveClusters(int *count, CUfunction h, const sg_launch_config *cfg) {
    API_BEGIN_ARGS("cuOccupancyMaxActiveClusters", LOG_OUT32(0), LA(count), LA(h), LA(cfg));
    API_NEED_INIT();
    unsigned cluster[3];
    int given;
    if (count == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    CUresult r = config_cluster(cfg, cluster, &given);
    if (r == CUDA_SUCCESS) r = occupancy_function(h);
    if (r != CUDA_SUCCESS) API_RETURN(r);
    if (!given) {
        *count = 0;
        API_RETURN(CUDA_SUCCESS);
    }
    unsigned long long blocks_in_cluster = (unsigned long long)cluster[0] * cluster[1] * cluster[2];
    if (blocks_in_cluster > CLUSTER_PORTABLE_MAX) API_RETURN(CUDA_ERROR_INVALID_CLUSTER_SIZE);
    unsigned threads = cfg->block[0] * cfg->block[1] * cfg->block[2];
    long long resident = (long long)blocks_per_sm((int)threads, cfg->shared_bytes) * SM_COUNT;
    *count = (int)(resident / (long long)blocks_in_cluster);
    API_RETURN(CUDA_SUCCESS);
}

/* ---- the launch log ------------------------------------------------------------------------------- */

typedef struct {
    char name[256];
    unsigned int grid[3];
    unsigned int block[3];
    unsigned int shared_bytes;
    int nparams;                    /* -1: the kernel's layout is unknown */
    unsigned long long stream_arg;  /* the stream handle as passed (0, 1, 2 or a stream) */
    unsigned long long stream;      /* the stream it was enqueued on */
    unsigned long long context;
    int device;
    int executed;                   /* its stream reached it */
    int captured;                   /* recorded into a graph under capture (never runs itself) */
    int from_graph;                 /* enqueued by cuGraphLaunch */
    unsigned long long function;
    unsigned long long params_size;
} simgpu_launch_info;

typedef struct {
    simgpu_launch_info info;
    size_t sizes[MAX_PARAMS];
    size_t offsets[MAX_PARAMS];
    unsigned char *params;
} launch_rec;

static launch_rec **launches;
static long nlaunches, cap_launches;

static long log_add(launch_rec *rec) {
    if (nlaunches == cap_launches) {
        long cap = cap_launches ? cap_launches * 2 : 64;
        launch_rec **grown = realloc(launches, (size_t)cap * sizeof *grown);
        if (grown == NULL) return -1;
        launches = grown;
        cap_launches = cap;
    }
    launches[nlaunches] = rec;
    sg_count("launches", 1);
    return nlaunches++;
}

const char *sg_kernel_name(long index) {
    return index >= 0 && index < nlaunches ? launches[index]->info.name : "?";
}

void sg_kernel_reached(long index) {
    if (index >= 0 && index < nlaunches) launches[index]->info.executed = 1;
}

long sg_kernel_relog(long index, int from_graph) {
    if (index < 0 || index >= nlaunches) return -1;
    launch_rec *rec = malloc(sizeof *rec);
    if (rec == NULL) return -1;
    *rec = *launches[index];
    rec->params = malloc(rec->info.params_size ? rec->info.params_size : 1);
    if (rec->params == NULL) {
        free(rec);
        return -1;
    }
    memcpy(rec->params, launches[index]->params, rec->info.params_size);
    rec->info.executed = 0;
    rec->info.captured = 0;
    rec->info.from_graph = from_graph;
    return log_add(rec);
}

SG_API long simgpu_launch_count(void) {
    pthread_mutex_lock(&sg_lock);
    long n = nlaunches;
    pthread_mutex_unlock(&sg_lock);
    return n;
}

SG_API int simgpu_launch_get(long index, simgpu_launch_info *out) {
    pthread_mutex_lock(&sg_lock);
    int ok = index >= 0 && index < nlaunches && out != NULL;
    if (ok) *out = launches[index]->info;
    pthread_mutex_unlock(&sg_lock);
    return ok ? 0 : -1;
}

/* Copies a launch's parameter bytes; returns their count (-1: no such launch). */
SG_API long long simgpu_launch_params(long index, unsigned char *buffer, size_t capacity) {
    pthread_mutex_lock(&sg_lock);
    long long n = -1;
    if (index >= 0 && index < nlaunches) {
        launch_rec *rec = launches[index];
        n = (long long)rec->info.params_size;
        if (buffer) memcpy(buffer, rec->params, capacity < (size_t)n ? capacity : (size_t)n);
    }
    pthread_mutex_unlock(&sg_lock);
    return n;
}

/* Copies a launch's parameter sizes; returns the parameter count (-1: unknown). */
SG_API int simgpu_launch_param_sizes(long index, size_t *sizes, int capacity) {
    pthread_mutex_lock(&sg_lock);
    int n = -1;
    if (index >= 0 && index < nlaunches) {
        launch_rec *rec = launches[index];
        n = rec->info.nparams;
        for (int i = 0; sizes && i < n && i < capacity; i++) sizes[i] = rec->sizes[i];
    }
    pthread_mutex_unlock(&sg_lock);
    return n;
}

/* ---- launches ---------------------------------------------------------------------------------------- */

#define PARAM_END 0
#define PARAM_BUFFER_POINTER 1
#define PARAM_BUFFER_SIZE 2

static CUresult launch(uint64_t fh, const unsigned grid[3], const unsigned block[3], unsigned shmem,
                       uint64_t stream, void **params, void **extra, const sg_launch_attr *attrs,
                       unsigned nattrs) {
    if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || block[0] == 0 || block[1] == 0 || block[2] == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (grid[1] > 65535 || grid[2] > 65535 || grid[0] > 2147483647u) return CUDA_ERROR_INVALID_VALUE;
    if (block[0] > 1024 || block[1] > 1024 || block[2] > 64 ||
        (unsigned long long)block[0] * block[1] * block[2] > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (params != NULL && extra != NULL) return CUDA_ERROR_INVALID_VALUE;
    if (nattrs > 0 && attrs == NULL) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < nattrs; i++) {
        if (attrs[i].id == 4) { /* cluster dimensions: the grid must be a whole number of clusters */
            unsigned cl[3];
            memcpy(cl, attrs[i].value, sizeof cl);
            for (int d = 0; d < 3; d++)
                if (cl[d] == 0 || grid[d] % cl[d] != 0) return CUDA_ERROR_INVALID_VALUE;
            if ((unsigned long long)cl[0] * cl[1] * cl[2] > 8) return CUDA_ERROR_INVALID_VALUE;
        }
    }
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    callable c;
    if (!callable_get(fh, &c)) {
        pthread_mutex_unlock(&sg_lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    sg_stream *s = sg_stream_resolve(stream, &err);
    if (s == NULL) {
        pthread_mutex_unlock(&sg_lock);
        return err;
    }
    if (c.module_ctx != 0 && c.module_ctx != s->ctx->o.h) {
        /* A module's function belongs to the context that loaded it. */
        pthread_mutex_unlock(&sg_lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (shmem > (unsigned)*c.max_dynamic_shared) {
        pthread_mutex_unlock(&sg_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    kernel_info *k = c.info;
    launch_rec *rec = calloc(1, sizeof *rec);
    if (rec == NULL) {
        pthread_mutex_unlock(&sg_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    snprintf(rec->info.name, sizeof rec->info.name, "%s", k->name);
    memcpy(rec->info.grid, grid, sizeof rec->info.grid);
    memcpy(rec->info.block, block, sizeof rec->info.block);
    rec->info.shared_bytes = shmem;
    rec->info.stream_arg = stream;
    rec->info.stream = s->o.h;
    rec->info.context = s->ctx->o.h;
    rec->info.device = s->ctx->dev;
    rec->info.function = fh;
    rec->info.nparams = k->nparams;
    CUresult r = CUDA_SUCCESS;
    if (extra != NULL) {
        const void *buf = NULL;
        size_t size = 0;
        int have_size = 0;
        for (int i = 0; extra[i] != (void *)PARAM_END && i < 64; i += 2) {
            if (extra[i] == (void *)PARAM_BUFFER_POINTER) buf = extra[i + 1];
            else if (extra[i] == (void *)PARAM_BUFFER_SIZE && extra[i + 1]) {
                size = *(size_t *)extra[i + 1];
                have_size = 1;
            } else {
                r = CUDA_ERROR_INVALID_VALUE;
                break;
            }
        }
        if (r == CUDA_SUCCESS && (buf == NULL || !have_size)) r = CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS && k->nparams >= 0 && size < k->param_bytes) r = CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS) {
            rec->params = malloc(size ? size : 1);
            if (rec->params) memcpy(rec->params, buf, size);
            rec->info.params_size = size;
        }
    } else if (k->nparams > 0) {
        if (params == NULL) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            rec->params = calloc(1, k->param_bytes ? k->param_bytes : 1);
            for (int i = 0; rec->params && i < k->nparams; i++) {
                if (params[i] == NULL) {
                    r = CUDA_ERROR_INVALID_VALUE;
                    break;
                }
                memcpy(rec->params + k->offsets[i], params[i], k->sizes[i]);
            }
            rec->info.params_size = k->param_bytes;
        }
    } else {
        rec->params = calloc(1, 1);
    }
    if (r == CUDA_SUCCESS && rec->params == NULL) r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUDA_SUCCESS) {
        free(rec->params);
        free(rec);
        pthread_mutex_unlock(&sg_lock);
        return r;
    }
    for (int i = 0; i < k->nparams; i++) {
        rec->sizes[i] = k->sizes[i];
        rec->offsets[i] = k->offsets[i];
    }
    rec->info.captured = s->capture != NULL;
    long index = log_add(rec);
    sg_op *op = sg_op_new(OP_KERNEL);
    if (op) op->u.kernel.index = index;
    if (op && SG_CHECKING())
        sg_ck_kernel_ranges(op, k->name, rec->params, rec->info.params_size, k->nparams, k->offsets, k->sizes);
    r = sg_enqueue(s, op);
    pthread_mutex_unlock(&sg_lock);
    return r;
}

SG_API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                               unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                               CUstream stream, void **params, void **extra) {
    API_BEGIN_ARGS("cuLaunchKernel", 0, LA(f), LA(gx), LA(bx), LA(shmem), LA(stream), LA(params));
    API_NEED_INIT();
    unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    API_RETURN(launch(H(f), grid, block, shmem, H(stream), params, extra, NULL, 0));
}

SG_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                    unsigned int bx, unsigned int by, unsigned int bz,
                                    unsigned int shmem, CUstream stream, void **params, void **extra) {
    sg_set_ptds(1);
    CUresult r = cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
    sg_set_ptds(0);
    return r;
}

SG_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                          unsigned int gz, unsigned int bx, unsigned int by,
                                          unsigned int bz, unsigned int shmem, CUstream stream,
                                          void **params) {
    API_BEGIN_ARGS("cuLaunchCooperativeKernel", 0, LA(f), LA(gx), LA(bx), LA(shmem), LA(stream), LA(params));
    API_NEED_INIT();
    unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    API_RETURN(launch(H(f), grid, block, shmem, H(stream), params, NULL, NULL, 0));
}

SG_API CUresult cuLaunchKernelEx(const sg_launch_config *config, CUfunction f, void **params,
                                 void **extra) {
    API_BEGIN_ARGS("cuLaunchKernelEx", 0, LA(config), LA(f), LA(params), LA(extra),
                   LA(config != NULL ? config->stream : NULL));
    API_NEED_INIT();
    if (config == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    API_RETURN(launch(H(f), config->grid, config->block, config->shared_bytes, H(config->stream), params,
                      extra, config->attrs, config->num_attrs));
}

SG_API CUresult cuLaunchKernelEx_ptsz(const sg_launch_config *config, CUfunction f, void **params,
                                      void **extra) {
    sg_set_ptds(1);
    CUresult r = cuLaunchKernelEx(config, f, params, extra);
    sg_set_ptds(0);
    return r;
}

/* ---- the JIT linker: inputs concatenated, PTX kept readable ------------------------------------- */

typedef struct {
    sg_obj o;
    char *text;
    size_t len;
} sg_link;

SG_API CUresult cuLinkCreate_v2(unsigned int n, int *options, void **values, CUlinkState *out) {
    API_BEGIN_ARGS("cuLinkCreate_v2", LOG_OUT64(3), LA(n), LA(options), LA(values), LA(out));
    API_NEED_INIT();
    if (out == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    fill_jit_logs(n, options, values);
    sg_link *l = calloc(1, sizeof *l);
    if (l == NULL) API_RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    l->text = strdup("// simgpu linked image\n");
    l->len = strlen(l->text);
    pthread_mutex_lock(&sg_lock);
    sg_handle_new(l, K_LINK);
    *out = P(l->o.h);
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(CUDA_SUCCESS);
}

static CUresult link_append(uint64_t h, int type, const void *data, size_t size) {
    pthread_mutex_lock(&sg_lock);
    sg_link *l = sg_handle_get(h, K_LINK);
    CUresult r = CUDA_SUCCESS;
    if (l == NULL) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else if (type < 0 || type > 5) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else {
        const char *add = "\n// simgpu-opaque\n";
        size_t add_len = strlen(add);
        if (type == 1) { /* PTX */
            add = data;
            add_len = size ? strnlen(data, size) : strlen(data);
        }
        char *grown = realloc(l->text, l->len + add_len + 2);
        if (grown == NULL) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            memcpy(grown + l->len, add, add_len);
            l->len += add_len;
            grown[l->len++] = '\n';
            grown[l->len] = '\0';
            l->text = grown;
        }
    }
    pthread_mutex_unlock(&sg_lock);
    return r;
}

SG_API CUresult cuLinkAddData_v2(CUlinkState h, int type, void *data, size_t size, const char *name,
                                 unsigned int n, int *options, void **values) {
    API_BEGIN_ARGS("cuLinkAddData_v2", 0, LA(h), LA(type), LA(data), LA(size), LA(name), LA(n));
    API_NEED_INIT();
    (void)name;
    if (data == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    fill_jit_logs(n, options, values);
    API_RETURN(link_append(H(h), type, data, size));
}

SG_API CUresult cuLinkAddFile_v2(CUlinkState h, int type, const char *path, unsigned int n,
                                 int *options, void **values) {
    API_BEGIN_ARGS("cuLinkAddFile_v2", 0, LA(h), LA(type), LA(path), LA(n), LA(options), LA(values));
    API_NEED_INIT();
    if (path == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    fill_jit_logs(n, options, values);
    size_t size;
    void *data = read_file(path, &size);
    if (data == NULL) API_RETURN(CUDA_ERROR_FILE_NOT_FOUND);
    CUresult r = link_append(H(h), type, data, size);
    free(data);
    API_RETURN(r);
}

SG_API CUresult cuLinkComplete(CUlinkState h, void **cubin, size_t *size) {
    API_BEGIN_ARGS("cuLinkComplete", LOG_OUT64(1) | LOG_OUT64(2), LA(h), LA(cubin), LA(size));
    API_NEED_INIT();
    if (cubin == NULL || size == NULL) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    pthread_mutex_lock(&sg_lock);
    sg_link *l = sg_handle_get(H(h), K_LINK);
    if (l) {
        *cubin = l->text;
        *size = l->len + 1;
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(l ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

SG_API CUresult cuLinkDestroy(CUlinkState h) {
    API_BEGIN_ARGS("cuLinkDestroy", 0, LA(h));
    API_NEED_INIT();
    pthread_mutex_lock(&sg_lock);
    sg_link *l = sg_handle_get(H(h), K_LINK);
    if (l) {
        sg_handle_drop(l->o.h);
        free(l->text);
        free(l);
    }
    pthread_mutex_unlock(&sg_lock);
    API_RETURN(l ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

/* ---- host implementations of kernels (simgpu_register_kernel) ------------------------------------ */

/* A kernel launched on the simulator computes only when a host implementation is registered
 * for its name.  The implementation runs on the stream's worker, in the place of the launch
 * in stream order (after the stream's earlier work, before its later work; in a graph's
 * order on every replay), outside the simulator's lock, with every driver call answering
 * CUDA_ERROR_NOT_PERMITTED as in a host function.  Device memory is reached through
 * simgpu_kernel_memory.  Registering again replaces the implementation once no call of the
 * old one is running; NULL removes it.  Entries are never freed: a launch enqueued before a
 * replacement calls whatever is registered when it runs. */
typedef struct simgpu_kernel_launch {
    const char *name;
    unsigned grid[3], block[3];
    unsigned shared_bytes;
    int nparams;                 /* -1: the image did not say */
    const unsigned char *params; /* the parameter buffer, as the kernel receives it */
    size_t params_size;
    const size_t *offsets;       /* nparams entries */
    const size_t *sizes;
    unsigned long long stream;
    int device;
} simgpu_kernel_launch;

typedef void (*simgpu_kernel_fn)(const simgpu_kernel_launch *launch, void *user);

typedef struct host_kernel {
    struct host_kernel *next;
    char *name;
    simgpu_kernel_fn fn;
    void *user;
    int running;
} host_kernel;

static host_kernel *host_kernels;
static pthread_cond_t host_kernel_idle = PTHREAD_COND_INITIALIZER;

static host_kernel *host_kernel_find(const char *name) {
    for (host_kernel *k = host_kernels; k != NULL; k = k->next)
        if (strcmp(k->name, name) == 0) return k;
    return NULL;
}

/* 0, or -1 when refused (no name, no memory, or called from an implementation). */
SG_API int simgpu_register_kernel(const char *name, simgpu_kernel_fn fn, void *user) {
    if (name == NULL || sg_in_host_fn) return -1;
    pthread_mutex_lock(&sg_lock);
    host_kernel *k = host_kernel_find(name);
    if (k == NULL && fn != NULL) {
        k = calloc(1, sizeof *k);
        char *copy = strdup(name);
        if (k == NULL || copy == NULL) {
            free(k);
            free(copy);
            pthread_mutex_unlock(&sg_lock);
            return -1;
        }
        k->name = copy;
        k->next = host_kernels;
        __atomic_store_n(&host_kernels, k, __ATOMIC_RELEASE); /* read unlocked: sg_kernel_execute */
    }
    if (k != NULL) {
        while (k->running > 0) pthread_cond_wait(&host_kernel_idle, &sg_lock);
        k->fn = fn;
        k->user = user;
    }
    pthread_mutex_unlock(&sg_lock);
    return 0;
}

/* Whether a host implementation is registered for `name`. */
SG_API int simgpu_kernel_registered(const char *name) {
    if (name == NULL) return 0;
    pthread_mutex_lock(&sg_lock);
    host_kernel *k = host_kernel_find(name);
    int registered = k != NULL && k->fn != NULL;
    pthread_mutex_unlock(&sg_lock);
    return registered;
}

/* The address where an implementation reads and writes `nbytes` of memory at device (or
 * managed, or pinned host) address `p`; NULL when they do not lie in one allocation. */
SG_API void *simgpu_kernel_memory(unsigned long long p, size_t nbytes) {
    CUresult err = CUDA_SUCCESS;
    pthread_mutex_lock(&sg_lock);
    unsigned char *w = sg_worker_addr((CUdeviceptr)p, nbytes ? nbytes : 1, 1, &err);
    pthread_mutex_unlock(&sg_lock);
    return err == CUDA_SUCCESS ? w : NULL;
}

/* Runs on the stream's worker, the lock not held: the launch's implementation, if any.
 * While none was ever registered (entries are never freed), a launch takes no lock here. */
void sg_kernel_execute(long index) {
    if (__atomic_load_n(&host_kernels, __ATOMIC_ACQUIRE) == NULL) return;
    pthread_mutex_lock(&sg_lock);
    launch_rec *rec = index >= 0 && index < nlaunches ? launches[index] : NULL;
    host_kernel *k = rec != NULL ? host_kernel_find(rec->info.name) : NULL;
    if (k == NULL || k->fn == NULL) {
        pthread_mutex_unlock(&sg_lock);
        return;
    }
    simgpu_kernel_launch launch = {0};
    launch_rec copy = *rec;
    copy.params = malloc(rec->info.params_size ? rec->info.params_size : 1);
    if (copy.params == NULL) {
        pthread_mutex_unlock(&sg_lock);
        fprintf(stderr, "simgpu: no memory to run kernel %s's host implementation\n", rec->info.name);
        return;
    }
    memcpy(copy.params, rec->params, rec->info.params_size);
    simgpu_kernel_fn fn = k->fn;
    void *user = k->user;
    k->running++;
    pthread_mutex_unlock(&sg_lock);
    launch.name = copy.info.name;
    memcpy(launch.grid, copy.info.grid, sizeof launch.grid);
    memcpy(launch.block, copy.info.block, sizeof launch.block);
    launch.shared_bytes = copy.info.shared_bytes;
    launch.nparams = copy.info.nparams;
    launch.params = copy.params;
    launch.params_size = copy.info.params_size;
    launch.offsets = copy.offsets;
    launch.sizes = copy.sizes;
    launch.stream = copy.info.stream;
    launch.device = copy.info.device;
    sg_in_host_fn = 1;
    fn(&launch, user);
    sg_in_host_fn = 0;
    free(copy.params);
    pthread_mutex_lock(&sg_lock);
    k->running--;
    pthread_cond_broadcast(&host_kernel_idle);
    pthread_mutex_unlock(&sg_lock);
}
