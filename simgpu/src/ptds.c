/* simgpu per-thread-default-stream variants of the stream entry points (the
 * driver's "_ptsz" symbols, handed out by cuGetProcAddress when the caller asks
 * for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM): in them a NULL stream is
 * the calling thread's default stream, not the legacy one.  The copy, memset and
 * launch variants sit beside their entry points. */
#include "sim.h"

void sg_set_ptds(int on);

#define PTSZ(name, params, args)             \
    CUresult name params;                    \
    SG_API CUresult name##_ptsz params {     \
        sg_set_ptds(1);                      \
        CUresult r_ = name args;             \
        sg_set_ptds(0);                      \
        return r_;                           \
    }

PTSZ(cuStreamGetPriority, (CUstream h, int *priority), (h, priority))
PTSZ(cuStreamGetDevice, (CUstream h, CUdevice *dev), (h, dev))
PTSZ(cuStreamGetFlags, (CUstream h, unsigned int *flags), (h, flags))
PTSZ(cuStreamGetId, (CUstream h, unsigned long long *id), (h, id))
PTSZ(cuStreamGetCtx, (CUstream h, CUcontext *pctx), (h, pctx))
PTSZ(cuStreamGetCtx_v2, (CUstream h, CUcontext *pctx, CUgreenCtx *pgreen), (h, pctx, pgreen))
PTSZ(cuStreamWaitEvent, (CUstream h, CUevent e, unsigned int flags), (h, e, flags))
PTSZ(cuStreamAddCallback, (CUstream h, CUstreamCallback fn, void *data, unsigned int flags),
     (h, fn, data, flags))
PTSZ(cuStreamBeginCapture, (CUstream h), (h))
PTSZ(cuStreamBeginCapture_v2, (CUstream h, int mode), (h, mode))
PTSZ(cuStreamEndCapture, (CUstream h, CUgraph *g), (h, g))
PTSZ(cuStreamIsCapturing, (CUstream h, int *status), (h, status))
PTSZ(cuStreamGetCaptureInfo_v2,
     (CUstream h, int *status, cuuint64_t *id, CUgraph *g, const CUgraphNode **deps, size_t *n),
     (h, status, id, g, deps, n))
PTSZ(cuStreamGetCaptureInfo_v3,
     (CUstream h, int *status, cuuint64_t *id, CUgraph *g, const CUgraphNode **deps,
      const void **edges, size_t *n),
     (h, status, id, g, deps, edges, n))
PTSZ(cuStreamQuery, (CUstream h), (h))
PTSZ(cuStreamSynchronize, (CUstream h), (h))
PTSZ(cuLaunchHostFunc, (CUstream h, CUhostFn fn, void *data), (h, fn, data))
PTSZ(cuLaunchHostFunc_v2, (CUstream h, CUhostFn fn, void *data, unsigned int mode),
     (h, fn, data, mode))
PTSZ(cuEventRecord, (CUevent e, CUstream h), (e, h))
PTSZ(cuEventRecordWithFlags, (CUevent e, CUstream h, unsigned int flags), (e, h, flags))
PTSZ(cuGraphLaunch, (CUgraphExec x, CUstream h), (x, h))
PTSZ(cuGraphUpload, (CUgraphExec x, CUstream h), (x, h))
PTSZ(cuMemAllocAsync, (CUdeviceptr * p, size_t size, CUstream h), (p, size, h))
PTSZ(cuMemFreeAsync, (CUdeviceptr p, CUstream h), (p, h))
PTSZ(cuMemAllocFromPoolAsync, (CUdeviceptr * p, size_t size, CUmemoryPool pool, CUstream h),
     (p, size, pool, h))
