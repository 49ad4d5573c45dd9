# torch's negative and conjugate bits, and how they are read.
#
# A torch tensor with either bit set is a lazy view whose memory does not hold its
# values; stridedview refuses it.  Asking through ``Tensor.is_neg()`` costs about 700
# instructions (argument handling, a warning handler, the GIL released and taken back),
# a quarter of a torch view.  So, where the answer is provably the method's, the bit is
# read in C: torch's shipped header (torch/csrc/autograd/python_variable.h) declares the
# Python tensor object as ``{PyObject_HEAD; at::Tensor cdata; ...}``, an ``at::Tensor``
# being one pointer to its TensorImpl, so ``(char *)tensor + offset`` is a valid
# ``const at::Tensor &`` for torch's exported ``at::native::is_neg`` and ``is_conj``
# (the C++ functions the methods end in).  The offset and the functions are found and
# checked against the methods once per process (_calibrate_torch_bits); if anything
# there fails or disagrees, the methods are used for good.

# The same calibrated offset gives torch's exported ``at::toDLPackNonOwning``, the
# C++ function its exchange API's ``dltensor_from_py_object_no_sync`` ends in: called
# on the tensor object's own at::Tensor, it lends the same DLTensor without the
# pybind11 conversion around it (an at::Tensor copied and dropped, two Python
# reference counts taken and given back under a GIL guard: about 390 of the exchange
# API's 550 instructions).  It reports a failure by throwing, caught in C++
# (_cxx_guard.cpp); a failed call goes to the exchange API, which raises its error.

# The fields reader: c10::TensorImpl's own fields, read in C where the stable ABI's
# getters would only read them for us (about 120 of a view's instructions are the six
# calls a view makes for its layout, dtype, device and extents).  torch's shipped
# header (c10/core/TensorImpl.h) lays the TensorImpl out as a vtable pointer, reference
# counts, the storage, ..., ``sizes_and_strides_`` (a ``size_t`` count, then the extents
# and strides inline for up to a handful of dimensions), ``storage_offset_``,
# ``numel_``, ``data_type_`` (a 16-bit TypeMeta index, torch's ScalarType for scalar
# types), ``device_opt_``, bit fields and ``key_set_`` (the DispatchKeySet, one 64-bit
# word).  The calibration (_calibrate_torch_fields, after the stable ABI is proven)
# finds every offset it uses on probe tensors from torch's own answers: the extents'
# and strides' addresses are what ``aoti_torch_get_sizes``/``_strides`` return, the
# count is the word before the extents, the dtype and the key set are the one place
# holding ``aoti_torch_get_dtype``'s code and ``torch._C._dispatch_keys(t).raw_repr()``
# on every probe; it then proves the whole read against the stable ABI's on every
# layout probe.  Invariants of the read (each view): the impl's vtable pointer is the
# plain c10::TensorImpl's seen on the probes (no subclass of it: sparse, quantized,
# nested, batched, functional and opaque tensors have their own), and its key set is
# exactly that of a plain CPU tensor, with or without autograd's keys (inference mode),
# as torch made the probes: so a dense strided CPU tensor, no negative or conjugate
# key, no Python key (__torch_dispatch__, which may answer sizes in Python), no
# functionalization, no symbolic shapes; its dimension count fits the inline arrays.
# Anything else is declined and read through the getters.  The data pointer
# (_read_storage_data, once _calibrate_torch_storage has proven it): the getter
# computes it as the StorageImpl's data plus ``storage_offset_`` elements, after
# ``mutable_data()``, which acts only where the storage's one
# ``has_mutable_data_ptr_check_`` byte is set (c10/core/StorageImpl.h: set for a
# copy-on-write storage, which it materialises, and for one that throws or warns on
# mutable access), and answers NULL for a tensor of no element.  So it is read from
# the StorageImpl where the impl has a storage whose check byte is 0, whose data is
# not NULL, and the tensor has an element; everywhere else the getter is asked, as
# before.  The offsets (the impl's ``storage_``, ``storage_offset_`` and ``numel_``;
# the StorageImpl's data address and check byte) are found from torch's answers
# (``untyped_storage()._cdata``, ``.data_ptr()``, ``storage_offset()``, ``numel()``)
# and storages made copy-on-write, throwing and warning, and the read is proven equal
# to the getter's on every probe the fields reader reads.  The calibration's searches stop at the first offset holding every probe's
# value (within torch's own bound on sizeof(TensorImpl), 208 bytes on 64-bit
# systems); the reader is used only where the calibration proved every offset
# (_torch_fields_reader(); a test switch turns it off).

# The TorchFunctionMode check (each view of a tensor): torch's exported
# ``at::impl::torch_function_mode_enabled()`` reads its thread-local
# ``PythonTorchFunctionTLS`` through two ``__tls_get_addr`` calls, about 40
# instructions.  The struct's address in a thread is what torch's exported
# ``PythonTorchFunctionTLS::get_state()`` returns there, and it stays the same for
# the thread's life (a thread-local of a library loaded for good), so it is cached
# per OS thread in a thread-local of ours and read in place: a mode is enabled where
# ``disabled_state_`` is not ALL_DISABLED and ``stack_`` is not empty, which is
# torch's own function.  torch's shipped header (ATen/PythonTorchFunctionTLS.h)
# lays the struct out as the 32-bit enum ``disabled_state_``, the bool
# ``skip_next_``, then ``stack_``, a std::vector of shared_ptrs (its first and
# last pointers at 8 and 16 bytes).  The calibration (_calibrate_torch_mode_state,
# after the bits' calibration has proven torch's function) checks that layout on
# torch's own states: the enum's three values under torch's context managers,
# the vector's length as torch's ``_len_torch_function_stack()`` with a probe
# mode pushed, and the read equal to the function in each.  Anything else, or a
# compiler without thread-locals, leaves torch's function in use.

# The C++ functions return a C++ bool: declared with C's _Bool so that only its low
# byte is read (an int return would read the register's undefined upper bits).
cdef extern from *:
    """
    typedef void (*sv_cxx_fill)(const void *source, void *out);
    #ifdef SV_WITHOUT_CXX_GUARD  /* built with no C++ compiler (setup.py) */
    #define SV_HAVE_CXX_GUARD 0
    static int sv_cxx_fill_guarded(sv_cxx_fill f, const void *source, void *out)
    { (void)f; (void)source; (void)out; return -1; }
    #else
    #define SV_HAVE_CXX_GUARD 1
    int sv_cxx_fill_guarded(sv_cxx_fill f, const void *source, void *out);
    #endif
    typedef _Bool (*__pyx_sv_tensor_bit)(const void *);
    typedef _Bool (*__pyx_sv_thread_flag)(void);

    /* torch's PythonTorchFunctionTLS::get_state() (NULL: not proven), and what
       get_state() answered in this OS thread (NULL: not asked yet here). */
    typedef const char *(*sv_torch_mode_state_fn)(void);
    static sv_torch_mode_state_fn sv_torch_mode_state_getter = NULL;
    #if defined(__GNUC__)
    #define SV_HAVE_THREAD_LOCAL 1
    static __thread const char *sv_torch_mode_state_here = NULL;
    static CYTHON_INLINE const char *sv_torch_mode_state(void) {
        const char *state = sv_torch_mode_state_here;
        if (state == NULL) {
            state = sv_torch_mode_state_getter();
            sv_torch_mode_state_here = state;
        }
        return state;
    }
    #else
    #define SV_HAVE_THREAD_LOCAL 0
    static CYTHON_INLINE const char *sv_torch_mode_state(void) {
        return sv_torch_mode_state_getter();
    }
    #endif
    /* torch_function_mode_enabled(), read from the struct (the header's layout). */
    #define SV_TORCH_MODE_DISABLED(state) (*(const int32_t *)(state))
    #define SV_TORCH_MODE_STACK_BYTES(state) \
        ((size_t)(((const char *const *)((state) + 8))[1] - ((const char *const *)((state) + 8))[0]))
    static CYTHON_INLINE int sv_torch_mode_enabled_in_state(const char *state) {
        return SV_TORCH_MODE_DISABLED(state) != 2 && SV_TORCH_MODE_STACK_BYTES(state) != 0;
    }
    """
    ctypedef bint (*_TensorBit "__pyx_sv_tensor_bit")(const void *) noexcept nogil
    ctypedef bint (*_ThreadFlag "__pyx_sv_thread_flag")() noexcept nogil
    ctypedef void (*_CxxFill "sv_cxx_fill")(const void *source, void *out) noexcept nogil
    int _cxx_fill_guarded "sv_cxx_fill_guarded"(
        _CxxFill fill, const void *source, void *out
    ) noexcept nogil
    # Whether _cxx_fill_guarded catches C++ exceptions (else it calls nothing).
    bint _HAVE_CXX_GUARD "SV_HAVE_CXX_GUARD"
    ctypedef const char *(*_TorchModeStateFn "sv_torch_mode_state_fn")() noexcept nogil
    _TorchModeStateFn _torch_mode_state_getter "sv_torch_mode_state_getter"
    bint _HAVE_THREAD_LOCAL "SV_HAVE_THREAD_LOCAL"
    const char *_torch_mode_state "sv_torch_mode_state"() noexcept nogil
    int32_t _TORCH_MODE_DISABLED "SV_TORCH_MODE_DISABLED"(const char *) noexcept nogil
    size_t _TORCH_MODE_STACK_BYTES "SV_TORCH_MODE_STACK_BYTES"(const char *) noexcept nogil
    bint _torch_mode_enabled_in_state "sv_torch_mode_enabled_in_state"(const char *) noexcept nogil

# Exported by libtorch_cpu (Itanium-mangled): at::native::is_neg(at::Tensor const&),
# at::native::is_conj(at::Tensor const&), and at::impl::torch_function_mode_enabled(),
# whether a TorchFunctionMode would intercept a method call in this thread.
cdef tuple _TORCH_BIT_SYMBOLS = (
    "_ZN2at6native6is_negERKNS_6TensorE",
    "_ZN2at6native7is_conjERKNS_6TensorE",
    "_ZN2at4impl27torch_function_mode_enabledEv",
)

# at::impl::PythonTorchFunctionTLS::get_state(), exported by libtorch_cpu.
cdef str _TORCH_MODE_STATE_SYMBOL = "_ZN2at4impl22PythonTorchFunctionTLS9get_stateEv"

# at::toDLPackNonOwning(at::Tensor const&, DLTensor*), exported by libtorch_cpu.
cdef str _TORCH_LAYOUT_SYMBOL = "_ZN2at17toDLPackNonOwningERKNS_6TensorEP8DLTensor"

# torch's stable C ABI (torch/csrc/inductor/aoti_torch/c/shim.h, kept stable across
# releases on purpose): ``extern "C"`` functions taking an AtenTensorHandle, which is an
# ``at::Tensor *`` (the calibrated offset gives one), that catch C++ exceptions
# themselves and return an error code (0: success).  They answer everything a
# DLTensor holds, so the layout is read through them, with no C++ guard and no
# private symbol; torch's dtype, device and layout codes come from the shim's own
# code functions, asked at calibration.
ctypedef int32_t (*_AotiPtr)(const void *, void **) noexcept nogil
ctypedef int32_t (*_AotiArray)(const void *, int64_t **) noexcept nogil
ctypedef int32_t (*_AotiI64)(const void *, int64_t *) noexcept nogil
ctypedef int32_t (*_AotiI32)(const void *, int32_t *) noexcept nogil
ctypedef int32_t (*_AotiCode)() noexcept nogil
ctypedef int32_t (*_AotiFromPy)(void *, void **) noexcept  # torch_tensor_from_pyobject
ctypedef int32_t (*_AotiDelete)(void *) noexcept nogil  # aoti_torch_delete_tensor_object

# Whether the calibrated at::Tensor offset was also proven against torch's supported route
# from a Python tensor to its tensor (torch_tensor_from_pyobject, the stable C shim's, from
# torch 2.14): "shim" where torch exports it, "probes" (the methods alone) where not.
cdef str _cdata_offset_proof = "none"

cdef tuple _AOTI_GETTERS = (
    "aoti_torch_get_layout",
    "aoti_torch_get_dtype",
    "aoti_torch_get_device_type",
    "aoti_torch_get_device_index",
    "aoti_torch_get_dim",
    "aoti_torch_get_sizes",
    "aoti_torch_get_strides",
    "aoti_torch_get_data_ptr",
)

# torch dtype (by the shim's code function's name) -> DLPack (code, bits, lanes), as
# torch's own DLPack export names them.
cdef tuple _AOTI_DTYPES = (
    ("bool", kDLBool, 8),
    ("int8", kDLInt, 8),
    ("int16", kDLInt, 16),
    ("int32", kDLInt, 32),
    ("int64", kDLInt, 64),
    ("uint8", kDLUInt, 8),
    ("uint16", kDLUInt, 16),
    ("uint32", kDLUInt, 32),
    ("uint64", kDLUInt, 64),
    ("float16", kDLFloat, 16),
    ("float32", kDLFloat, 32),
    ("float64", kDLFloat, 64),
    ("bfloat16", kDLBfloat, 16),
    ("complex64", kDLComplex, 64),
    ("complex128", kDLComplex, 128),
    ("float8_e4m3fn", kDLFloat8_e4m3fn, 8),
    ("float8_e4m3fnuz", kDLFloat8_e4m3fnuz, 8),
    ("float8_e5m2", kDLFloat8_e5m2, 8),
    ("float8_e5m2fnuz", kDLFloat8_e5m2fnuz, 8),
    ("float8_e8m0fnu", kDLFloat8_e8m0fnu, 8),
)

cdef enum:
    _AOTI_DTYPE_SLOTS = 64
cdef DLDataType _aoti_dtypes[_AOTI_DTYPE_SLOTS]  # by torch's code; bits 0: not mapped
# The names of _AOTI_DTYPES this torch's shim maps (its aoti_torch_dtype_<name> exists):
# the calibration probes those only (torch 2.11 has float8_e8m0fnu, its shim no function for
# it: a probe of it made the reader and the exchange API disagree, and calibration fail).
cdef frozenset _aoti_mapped_names = frozenset()
cdef tuple _aoti_hidden_dtypes = ()  # (tests: names taken as absent from the shim)
cdef _AotiI32 _aoti_get_layout = NULL
cdef _AotiI32 _aoti_get_dtype = NULL
cdef _AotiI32 _aoti_get_device_type = NULL
cdef _AotiI32 _aoti_get_device_index = NULL
cdef _AotiI64 _aoti_get_dim = NULL
cdef _AotiArray _aoti_get_sizes = NULL
cdef _AotiArray _aoti_get_strides = NULL
cdef _AotiPtr _aoti_get_data_ptr = NULL
cdef int32_t _aoti_layout_strided = -1
cdef int32_t _aoti_device_cpu = -1
cdef int32_t _aoti_device_cuda = -1
# Set once the stable-ABI reader is proven (then it is used); a test switch.
cdef bint _stable_layout_ready = False
cdef bint _torch_layout_stable_enabled = True
cdef object _aoti_getters = _AOTI_GETTERS  # what the next calibration resolves


cdef inline int _fill_by_stable_abi(const void *tensor, DLTensor *out) noexcept nogil:
    """Fill ``out`` from the at::Tensor at ``tensor`` through the stable ABI; -1 (out
    partly written) for anything it does not map: a layout other than strided, an
    unmapped dtype, a device other than CPU and CUDA, or an error code.  The arrays
    are torch's, lent until Python code runs."""
    cdef int32_t layout, dtype, device_type, device_index
    cdef int64_t ndim
    if _aoti_get_layout(tensor, &layout) != 0 or layout != _aoti_layout_strided:
        return -1  # checked first: a sparse tensor's strides and data throw
    if _aoti_get_dtype(tensor, &dtype) != 0 or dtype < 0 or dtype >= _AOTI_DTYPE_SLOTS:
        return -1
    out.dtype = _aoti_dtypes[dtype]
    if out.dtype.bits == 0:
        return -1
    if _aoti_get_device_type(tensor, &device_type) != 0:
        return -1
    if device_type == _aoti_device_cpu:
        out.device.device_type = kDLCPU
        out.device.device_id = 0  # torch's DLPack export says 0 for the CPU
    elif device_type == _aoti_device_cuda:
        if _aoti_get_device_index(tensor, &device_index) != 0:
            return -1
        out.device.device_type = kDLCUDA
        out.device.device_id = device_index
    else:
        return -1
    if (
        _aoti_get_dim(tensor, &ndim) != 0
        or ndim < 0
        or ndim > 0x7FFFFFFF
        or _aoti_get_sizes(tensor, &out.shape) != 0
        or _aoti_get_strides(tensor, &out.strides) != 0
        or _aoti_get_data_ptr(tensor, &out.data) != 0
    ):
        return -1
    out.ndim = <int32_t>ndim
    out.byte_offset = 0
    return 0


# The fields reader's calibration (see the opening comment): offsets into the
# c10::TensorImpl, the plain impl's vtable pointer and the key sets accepted.
cdef enum:
    _IMPL_BYTES_READ = 208  # torch's bound on sizeof(TensorImpl) (64-bit)
cdef Py_ssize_t _impl_ndim_offset = 0
cdef Py_ssize_t _impl_sizes_offset = 0
cdef Py_ssize_t _impl_strides_offset = 0
cdef Py_ssize_t _impl_dtype_offset = 0
cdef Py_ssize_t _impl_keys_offset = 0
cdef size_t _impl_inline_dims = 0
cdef const void *_impl_vtable = NULL
cdef uint64_t _impl_plain_keys = 0  # a CPU tensor's key set
cdef uint64_t _impl_inference_keys = 0  # the same made in inference mode
cdef bint _torch_fields_ready = False  # set once the fields reader is proven
cdef bint _torch_fields_enabled = True  # a test switch
# Whether every read _view_from_plain_torch makes is proven and allowed (the bits'
# C reads, the stable ABI, the fields reader): one flag for the hot path, set by the
# calibration before it publishes its state, and again by each test switch.
cdef bint _torch_lean_ready = False
# The data pointer read from the tensor's StorageImpl (see the opening comment):
# offsets into the TensorImpl (its storage_, storage_offset_ and numel_) and into the
# StorageImpl (its DataPtr's address and has_mutable_data_ptr_check_), proven by
# _calibrate_torch_storage; _torch_storage_read is set once proven and allowed.
cdef Py_ssize_t _impl_storage_offset = 0
cdef Py_ssize_t _impl_storage_index_offset = 0
cdef Py_ssize_t _impl_numel_offset = 0
cdef Py_ssize_t _storage_data_offset = 0
cdef Py_ssize_t _storage_check_offset = 0
cdef bint _torch_storage_ready = False  # set once the storage read is proven
cdef bint _torch_storage_enabled = True  # a test switch
cdef bint _torch_storage_read = False  # both: the one flag the reader tests


cdef void _update_torch_lean(int state) noexcept:
    """Recompute _torch_lean_ready for the calibration state ``state``."""
    global _torch_lean_ready
    _torch_lean_ready = (
        state == _BITS_DIRECT and _torch_bits_direct_enabled
        and _stable_layout_ready and _torch_layout_stable_enabled and _torch_layout_direct_enabled
        and _torch_fields_ready and _torch_fields_enabled
    )


cdef inline int _fill_by_torch_fields(const void *tensor, DLTensor *out) noexcept nogil:
    """Fill ``out`` from the at::Tensor at ``tensor`` by reading its TensorImpl's fields
    (the data pointer through the stable ABI); -1 (``out`` partly written) for a tensor
    whose impl or key set is not a plain CPU tensor's, with more dimensions than the
    inline arrays hold, or with a dtype it does not map.  Valid once
    _torch_fields_ready; the arrays are the impl's, lent until Python code runs."""
    cdef const char *impl = (<const char **>tensor)[0]
    if impl == NULL or (<const void **>impl)[0] != _impl_vtable:
        return -1
    cdef uint64_t keys = (<const uint64_t *>(impl + _impl_keys_offset))[0]
    if keys != _impl_plain_keys and keys != _impl_inference_keys:
        return -1
    cdef size_t ndim = (<const size_t *>(impl + _impl_ndim_offset))[0]
    cdef uint16_t dtype = (<const uint16_t *>(impl + _impl_dtype_offset))[0]
    if ndim > _impl_inline_dims or dtype >= _AOTI_DTYPE_SLOTS:
        return -1
    out.dtype = _aoti_dtypes[dtype]
    if out.dtype.bits == 0:
        return -1
    if not (_torch_storage_read and _read_storage_data(impl, out.dtype.bits >> 3, &out.data)):
        if _aoti_get_data_ptr(tensor, &out.data) != 0:
            return -1
    out.device.device_type = kDLCPU
    out.device.device_id = 0  # torch's DLPack export says 0 for the CPU
    out.ndim = <int32_t>ndim
    out.shape = <int64_t *>(impl + _impl_sizes_offset)
    out.strides = <int64_t *>(impl + _impl_strides_offset)
    out.byte_offset = 0
    return 0


cdef inline bint _read_storage_data(const char *impl, int64_t itemsize, void **data) noexcept nogil:
    """Set ``data[0]`` to the first element's address of the plain CPU tensor whose
    TensorImpl is at ``impl`` (the fields reader's checks passed), read from its
    StorageImpl as ``aoti_torch_get_data_ptr`` computes it: the storage's data plus
    ``storage_offset_`` elements of ``itemsize`` bytes.  False, ``data`` untouched,
    where the getter must answer: no storage, a storage whose mutable-data check is
    on (copy-on-write, which the getter materialises; throw or warn on mutable
    access), no data, or no element (the getter's NULL).  Valid once
    _torch_storage_read."""
    cdef const char *storage = (<const char **>(impl + _impl_storage_offset))[0]
    if storage == NULL or (<const uint8_t *>(storage + _storage_check_offset))[0] != 0:
        return False
    cdef char *base = (<char **>(storage + _storage_data_offset))[0]
    if base == NULL or (<const int64_t *>(impl + _impl_numel_offset))[0] == 0:
        return False
    data[0] = base + itemsize * (<const int64_t *>(impl + _impl_storage_index_offset))[0]
    return True


cdef inline int _fill_torch_layout(const void *tensor, DLTensor *out) noexcept nogil:
    """The stable-ABI read (``_fill_by_stable_abi``), through the TensorImpl's fields
    where the fields reader is proven and the tensor is one it reads."""
    if _torch_fields_ready and _torch_fields_enabled and _fill_by_torch_fields(tensor, out) == 0:
        return 0
    return _fill_by_stable_abi(tensor, out)


def _torch_fields_reader():
    """Whether torch tensors' layouts are read from their TensorImpl's fields now:
    "fields" (plain CPU tensors; the rest through the stable ABI), "off" (the
    calibration did not prove it, or a test turned it off) or "uncalibrated"; for
    tests and the report."""
    if _torch_bits_reader_state == _BITS_UNCALIBRATED:
        return "uncalibrated"
    if (
        _torch_fields_ready and _torch_fields_enabled
        and _stable_layout_ready and _torch_layout_stable_enabled and _torch_layout_direct_enabled
    ):
        return "fields"
    return "off"


def _torch_fields_read(tensor):
    """What the fields reader reads of the torch tensor ``tensor``: ``(data, shape,
    strides, (code, bits, lanes))``, or None where it declines or is not proven; for
    tests."""
    torch = _sys.modules["torch"]
    if not isinstance(tensor, torch._C.TensorBase):
        raise TypeError(f"_torch_fields_read: a torch tensor, not {type(tensor).__name__!r}")
    if _bits_state() == _BITS_UNCALIBRATED:
        _calibrate_torch_bits()
    cdef DLTensor read
    if not _torch_fields_ready or _fill_by_torch_fields(_tensor_cdata(tensor), &read) != 0:
        return None
    return (
        <uintptr_t>read.data,
        tuple([read.shape[i] for i in range(read.ndim)]),
        tuple([read.strides[i] for i in range(read.ndim)]),
        (read.dtype.code, read.dtype.bits, read.dtype.lanes),
    )


def _torch_lean_path():
    """Whether a plain CPU torch tensor's view now takes the lean path
    (_view_from_plain_torch: bits and layout from its TensorImpl's fields, no exchange
    API frame); for tests."""
    return bool(_bits_state() == _BITS_DIRECT and _torch_lean_ready)


def _set_torch_fields_enabled(bint enabled):
    """Allow (True) or forbid (False) the fields reader; for tests."""
    global _torch_fields_enabled
    _torch_fields_enabled = enabled
    _update_torch_lean(_torch_bits_reader_state)


cdef const char *_impl_of(object probe) noexcept:
    """The TensorImpl address of a probe tensor (its at::Tensor's one pointer)."""
    return (<const char **>_tensor_cdata(probe))[0]


cdef Py_ssize_t _impl_offset_holding(list probes, list values, Py_ssize_t start, int width) except -2:
    """The first offset from ``start`` on, aligned to ``width``, at which every probe's
    TensorImpl holds its value in ``values`` (unsigned, ``width`` 8 or 2 bytes); -1 if
    none before _IMPL_BYTES_READ.  Nothing past the offset found is read (the fields
    looked for lie inside the impl: a match is the impl's own field)."""
    cdef Py_ssize_t offset
    cdef Py_ssize_t i
    cdef uint64_t word
    cdef const char *impl
    start = (start + width - 1) // width * width
    for offset in range(start, _IMPL_BYTES_READ - width + 1, width):
        for i in range(len(probes)):
            impl = _impl_of(probes[i])
            if width == 8:
                word = (<const uint64_t *>(impl + offset))[0]
            else:
                word = (<const uint16_t *>(impl + offset))[0]
            if word != <uint64_t>values[i]:
                break
        else:
            return offset
    return -1


cdef bint _calibrate_torch_fields(object torch, list probes) except -1:
    """Find the TensorImpl offsets the fields reader uses on ``probes`` (the stable
    ABI's layout probes, proven) and tensors of every inline dimension count, and
    prove the reader against the stable ABI on all of them; True if it is now used."""
    global _impl_ndim_offset, _impl_sizes_offset, _impl_strides_offset, _impl_dtype_offset
    global _impl_keys_offset, _impl_inline_dims, _impl_vtable, _impl_plain_keys
    global _impl_inference_keys, _torch_fields_ready, _torch_storage_ready, _torch_storage_read
    _torch_fields_ready = False
    _torch_storage_ready = False
    _torch_storage_read = False
    dispatch_keys = torch._C._dispatch_keys
    from torch.utils._python_dispatch import _disable_current_modes
    with torch._C.DisableTorchFunction(), _disable_current_modes():
        with torch.inference_mode():
            inference = torch.zeros(2, 3)
        by_dims = [torch.zeros((2,) * count) for count in range(10)]
        probes = probes + [inference] + by_dims
        keys = [dispatch_keys(probe).raw_repr() for probe in probes]
        dims = [probe.dim() for probe in probes]
        # What the reader must decline: a lazy bit, or a layout other than strided.
        lazy_or_unstrided = [
            bool(probe.is_neg() or probe.is_conj() or probe.layout is not torch.strided)
            for probe in probes
        ]
        dtypes = []
        for probe in probes:
            dtypes.append(_stable_dtype_code(probe))
        plain_keys = dispatch_keys(by_dims[1]).raw_repr()
        inference_keys = dispatch_keys(inference).raw_repr()

    # The extents and strides, where the getters find them for an inline tensor.
    cdef DLTensor stable, read
    cdef const char *impl
    cdef Py_ssize_t sizes_offset = -1, strides_offset = -1
    cdef Py_ssize_t ndim_offset, keys_offset, dtype_offset, start, i
    for probe in by_dims[:2]:
        memset(&stable, 0, sizeof(DLTensor))
        if _fill_by_stable_abi(_tensor_cdata(probe), &stable) != 0:
            return False
        impl = _impl_of(probe)
        if sizes_offset < 0:
            sizes_offset = <const char *>stable.shape - impl
            strides_offset = <const char *>stable.strides - impl
        elif (
            sizes_offset != <const char *>stable.shape - impl
            or strides_offset != <const char *>stable.strides - impl
        ):
            return False
    if not (
        <Py_ssize_t>sizeof(size_t) <= sizes_offset < strides_offset
        and (strides_offset - sizes_offset) % sizeof(int64_t) == 0
    ):
        return False
    cdef size_t inline_dims = (strides_offset - sizes_offset) // sizeof(int64_t)
    if strides_offset + <Py_ssize_t>(inline_dims * sizeof(int64_t)) > _IMPL_BYTES_READ:
        return False
    # Up to inline_dims dimensions the arrays are inline, past it they are not.
    for count in range(len(by_dims)):
        memset(&stable, 0, sizeof(DLTensor))
        if _fill_by_stable_abi(_tensor_cdata(by_dims[count]), &stable) != 0:
            return False
        impl = _impl_of(by_dims[count])
        inline = (
            <const char *>stable.shape == impl + sizes_offset
            and <const char *>stable.strides == impl + strides_offset
        )
        if inline != (<size_t>count <= inline_dims):
            return False
    if inline_dims + 1 >= <size_t>len(by_dims):
        return False  # the first dimension count past the inline arrays is not probed
    ndim_offset = sizes_offset - <Py_ssize_t>sizeof(size_t)
    for i in range(len(probes)):
        if (<const size_t *>(_impl_of(probes[i]) + ndim_offset))[0] != <size_t>dims[i]:
            return False
    start = strides_offset + <Py_ssize_t>(inline_dims * sizeof(int64_t))
    keys_offset = _impl_offset_holding(probes, keys, start, 8)
    usable = [i for i, code in enumerate(dtypes) if code >= 0]
    dtype_offset = _impl_offset_holding(
        [probes[i] for i in usable], [dtypes[i] for i in usable], start, 2
    )
    # (the header's order: data_type_ before key_set_; probes of many dtypes and key
    # sets, so that no other field holds all of them)
    if (
        keys_offset < 0 or dtype_offset < 0 or dtype_offset >= keys_offset
        or len(set(dtypes)) < 10 or len(set(keys)) < 4
    ):
        return False
    vtable = (<const void **>_impl_of(by_dims[1]))[0]

    _impl_ndim_offset = ndim_offset
    _impl_sizes_offset = sizes_offset
    _impl_strides_offset = strides_offset
    _impl_dtype_offset = dtype_offset
    _impl_keys_offset = keys_offset
    _impl_inline_dims = inline_dims
    _impl_vtable = vtable
    _impl_plain_keys = plain_keys
    _impl_inference_keys = inference_keys
    # The proof: on every probe the reader reads exactly what the getters read, or
    # declines; it reads the plain and inference probes, and declines the sparse,
    # negative and conjugate ones.
    for i in range(len(probes)):
        memset(&stable, 0, sizeof(DLTensor))
        memset(&read, 0, sizeof(DLTensor))
        if _fill_by_torch_fields(_tensor_cdata(probes[i]), &read) != 0:
            continue
        if (
            lazy_or_unstrided[i]
            or _read_is_neg(_tensor_cdata(probes[i]))
            or _read_is_conj(_tensor_cdata(probes[i]))
            or _fill_by_stable_abi(_tensor_cdata(probes[i]), &stable) != 0
            or not _same_dltensor(&read, &stable)
        ):
            return False
    if sum(lazy_or_unstrided) < 3:
        return False  # the sparse, negative and conjugate probes are among them
    for probe in (inference, by_dims[0], by_dims[inline_dims], probes[0]):
        if _fill_by_torch_fields(_tensor_cdata(probe), &read) != 0:
            return False
    _torch_fields_ready = True
    try:
        _calibrate_torch_storage(torch, probes)
    except Exception:
        pass  # the data pointer stays the getter's; the fields reader is proven
    return True


def _set_torch_storage_enabled(bint enabled):
    """Allow (True) or forbid (False) the data pointer's read from the StorageImpl
    (the getter answers instead); for tests."""
    global _torch_storage_enabled, _torch_storage_read
    _torch_storage_enabled = enabled
    _torch_storage_read = _torch_storage_ready and _torch_storage_enabled


def _torch_storage_reader():
    """Whether the fields reader reads the data pointer from the StorageImpl now:
    "storage", "getter" (``aoti_torch_get_data_ptr``: not proven, or a test turned
    it off) or "uncalibrated"; for tests and the report."""
    if _torch_bits_reader_state == _BITS_UNCALIBRATED:
        return "uncalibrated"
    return "storage" if _torch_storage_read else "getter"


cdef Py_ssize_t _word_offset_holding(list addresses, list values, Py_ssize_t start, Py_ssize_t end) except -2:
    """The first 8-byte-aligned offset in [start, end) at which the object at each of
    ``addresses`` holds its value in ``values``; -1 if none."""
    cdef Py_ssize_t offset, i
    for offset in range(start, end - 7, 8):
        for i in range(len(addresses)):
            if (<const uint64_t *><uintptr_t>(<uintptr_t>addresses[i] + offset))[0] != <uint64_t>values[i]:
                break
        else:
            return offset
    return -1


cdef bint _calibrate_torch_storage(object torch, list probes) except -1:
    """Find the offsets _read_storage_data uses on the probes the fields reader reads
    (``probes``, more with distinct storage offsets, and storages whose mutable-data
    check is on: copy-on-write, throw and warn on mutable access), and prove the
    read against ``aoti_torch_get_data_ptr`` on every probe; True if it is now used."""
    global _impl_storage_offset, _impl_storage_index_offset, _impl_numel_offset
    global _storage_data_offset, _storage_check_offset, _torch_storage_ready
    global _torch_storage_read
    _torch_storage_ready = False
    _torch_storage_read = False
    cdef DLTensor read
    from torch.utils._python_dispatch import _disable_current_modes
    with torch._C.DisableTorchFunction(), _disable_current_modes():
        flat = torch.arange(40.0)
        probes = probes + [flat[k:k + 8] for k in (2, 3, 5, 7)]
        # Only what the fields reader reads (plain CPU tensors) is read this way.
        plain = [
            probe for probe in probes
            if _fill_by_torch_fields(_tensor_cdata(probe), &read) == 0
        ]
        storages = [probe.untyped_storage() for probe in plain]
        storage_impls = [storage._cdata for storage in storages]
        datas = [storage.data_ptr() for storage in storages]
        indexes = [probe.storage_offset() for probe in plain]
        counts = [probe.numel() for probe in plain]
        # Storages whose mutable-data check is on, each a fresh one.
        cow = torch.arange(6.0)
        torch._lazy_clone(cow)  # cow's storage is now copy-on-write, shared
        throwing = torch.arange(6.0)
        torch._C._set_throw_on_mutable_data_ptr(throwing)
        warning = torch.arange(6.0)
        torch._C._set_warn_deprecated_on_mutable_data_ptr(warning)
        checked = [cow, throwing, warning]
        checked_impls = [probe.untyped_storage()._cdata for probe in checked]
    if (
        len(plain) < 20 or len(set(indexes)) < 5 or len(set(counts)) < 5
        or len(set(storage_impls)) < 20 or 0 not in counts
    ):
        return False
    impls = [<uintptr_t>_impl_of(probe) for probe in plain]
    # storage_ lies between the reference counts and sizes_and_strides_; the
    # storage offset and the element count right after the inline arrays (the
    # header's order: storage_offset_, then numel_).
    start = _impl_strides_offset + <Py_ssize_t>(_impl_inline_dims * sizeof(int64_t))
    storage_offset = _word_offset_holding(impls, storage_impls, 8, _impl_ndim_offset)
    index_offset = _word_offset_holding(impls, indexes, start, _IMPL_BYTES_READ)
    numel_offset = _word_offset_holding(impls, counts, start, _IMPL_BYTES_READ)
    # The DataPtr's address first in the StorageImpl, after its vtable pointer and
    # reference counts; the flags follow it and its size (c10/core/StorageImpl.h),
    # all within its first 64 bytes: the mutable-data check is the one byte there
    # that is 0 on every plain probe's storage and 1 on each checked storage.
    filled = [i for i in range(len(plain)) if counts[i] != 0 and datas[i] != 0]
    if len(filled) < 20:
        return False
    data_offset = _word_offset_holding(
        [storage_impls[i] for i in filled], [datas[i] for i in filled], 16, 48
    )
    if storage_offset < 0 or index_offset < 0 or numel_offset != index_offset + 8 or data_offset < 0:
        return False
    cdef Py_ssize_t offset
    cdef bint holds
    found = []
    for offset in range(data_offset + 8, 64):
        holds = True
        for address in storage_impls:
            holds = holds and (<const uint8_t *><uintptr_t>(<uintptr_t>address + offset))[0] == 0
        for address in checked_impls:
            holds = holds and (<const uint8_t *><uintptr_t>(<uintptr_t>address + offset))[0] == 1
        if holds:
            found.append(offset)
    if len(found) != 1:
        return False
    _impl_storage_offset = storage_offset
    _impl_storage_index_offset = index_offset
    _impl_numel_offset = numel_offset
    _storage_data_offset = data_offset
    _storage_check_offset = found[0]
    # The proof: on every probe the fields reader reads, the data pointer read from
    # the storage is the getter's; on the checked storages it declines.
    cdef void *by_storage
    cdef void *by_getter
    cdef Py_ssize_t i
    cdef int code
    cdef bint answered
    for i in range(len(plain)):
        code = _stable_dtype_code(plain[i])
        if code < 0 or _aoti_get_data_ptr(_tensor_cdata(plain[i]), &by_getter) != 0:
            return False
        by_storage = NULL
        answered = _read_storage_data(_impl_of(plain[i]), _aoti_dtypes[code].bits >> 3, &by_storage)
        # An empty tensor is left to the getter (its NULL); every other is read.
        if answered != (counts[i] != 0) or (answered and by_storage != by_getter):
            return False
    for probe in checked:
        if _read_storage_data(_impl_of(probe), 4, &by_storage):
            return False
    _torch_storage_ready = True
    _torch_storage_read = _torch_storage_enabled
    return True


cdef int _stable_dtype_code(object probe) except -2:
    """The stable ABI's dtype code of a probe; -1 where it refuses."""
    cdef int32_t code
    if _aoti_get_dtype(_tensor_cdata(probe), &code) != 0:
        return -1
    return code


def _set_torch_layout_stable_enabled(bint enabled):
    """Allow (True) or forbid (False) the stable-ABI read of a torch tensor's layout;
    for tests."""
    global _torch_layout_stable_enabled
    _torch_layout_stable_enabled = enabled
    _update_torch_lean(_torch_bits_reader_state)


cdef bint _resolve_stable_abi(object library) except -1:
    """Find the stable ABI's getters and codes in ``library``; False if any is missing."""
    global _aoti_get_layout, _aoti_get_dtype, _aoti_get_device_type, _aoti_get_device_index
    global _aoti_get_dim, _aoti_get_sizes, _aoti_get_strides, _aoti_get_data_ptr
    global _aoti_layout_strided, _aoti_device_cpu, _aoti_device_cuda
    import ctypes

    def address(name):
        try:
            return ctypes.cast(library[name], ctypes.c_void_p).value or 0
        except (AttributeError, TypeError):
            return 0

    getters = [address(name) for name in _aoti_getters]
    if len(getters) != 8 or not all(getters):
        return False
    codes = [address(name) for name in (
        "aoti_torch_layout_strided", "aoti_torch_device_type_cpu", "aoti_torch_device_type_cuda"
    )]
    if not all(codes):
        return False
    cdef int i
    for i in range(_AOTI_DTYPE_SLOTS):
        _aoti_dtypes[i].code = 0
        _aoti_dtypes[i].bits = 0
        _aoti_dtypes[i].lanes = 0
    cdef int32_t code
    global _aoti_mapped_names
    mapped = []
    for name, dl_code, bits in _AOTI_DTYPES:
        function = 0 if name in _aoti_hidden_dtypes else address("aoti_torch_dtype_" + name)
        if not function:
            continue  # a dtype this torch's shim does not map
        mapped.append(name)
        code = (<_AotiCode><uintptr_t>function)()
        if code < 0 or code >= _AOTI_DTYPE_SLOTS or _aoti_dtypes[code].bits != 0:
            return False
        _aoti_dtypes[code].code = dl_code
        _aoti_dtypes[code].bits = bits
        _aoti_dtypes[code].lanes = 1
    _aoti_mapped_names = frozenset(mapped)
    _aoti_layout_strided = (<_AotiCode><uintptr_t>codes[0])()
    _aoti_device_cpu = (<_AotiCode><uintptr_t>codes[1])()
    _aoti_device_cuda = (<_AotiCode><uintptr_t>codes[2])()
    _aoti_get_layout = <_AotiI32><uintptr_t>getters[0]
    _aoti_get_dtype = <_AotiI32><uintptr_t>getters[1]
    _aoti_get_device_type = <_AotiI32><uintptr_t>getters[2]
    _aoti_get_device_index = <_AotiI32><uintptr_t>getters[3]
    _aoti_get_dim = <_AotiI64><uintptr_t>getters[4]
    _aoti_get_sizes = <_AotiArray><uintptr_t>getters[5]
    _aoti_get_strides = <_AotiArray><uintptr_t>getters[6]
    _aoti_get_data_ptr = <_AotiPtr><uintptr_t>getters[7]
    return True


cdef bint _calibrate_stable_layout(object library, object torch) except -1:
    """Use the stable-ABI reader (at the calibrated offset) if, on every layout probe,
    it lends exactly the DLTensor torch's exchange API lends and refuses where that
    fails; True if it is now in use.  Needs the bits' calibration."""
    global _stable_layout_ready
    _stable_layout_ready = False
    cdef _ProducerType tensor_info = _look_up_type(torch.Tensor)
    cdef DLTensorFromPyObject lend = tensor_info.dltensor_from_py_object
    if lend == NULL:
        return False
    try:
        if not _resolve_stable_abi(library):
            return False
        from torch.utils._python_dispatch import _disable_current_modes
        with torch._C.DisableTorchFunction(), _disable_current_modes():
            probes = _torch_layout_probes(torch, _aoti_mapped_names)
    except Exception:
        return False
    cdef DLTensor stable, lent
    cdef int stable_failed, lent_failed
    failures = 0
    for probe in probes:
        if type(probe) is not tensor_info.described_type:
            return False
        memset(&stable, 0, sizeof(DLTensor))
        memset(&lent, 0, sizeof(DLTensor))
        stable_failed = _fill_by_stable_abi(_tensor_cdata(probe), &stable)
        lent_failed = lend(<void *><PyObject *>probe, &lent)
        if lent_failed:
            PyErr_Clear()
        if stable_failed != lent_failed:
            return False
        if lent_failed:
            failures += 1
        elif not _same_dltensor(&stable, &lent):
            return False
    if failures != 1:  # exactly the sparse probe
        return False
    _stable_layout_ready = True
    try:
        _calibrate_torch_fields(torch, probes)
    except Exception:
        pass  # the fields reader stays off; the stable ABI is proven all the same
    return True


cdef enum:
    _BITS_UNCALIBRATED = 0
    _BITS_DIRECT = 1  # read through _read_is_neg and _read_is_conj
    _BITS_METHODS = 2  # asked through Tensor.is_neg() and Tensor.is_conj()

cdef int _torch_bits_reader_state = _BITS_UNCALIBRATED

# Calibration publishes the function pointers and the offset first, then the state
# with a release store; the hot path reads the state with an acquire load, so a
# thread that sees "calibrated" sees everything calibration wrote (a free-threaded
# build runs readers and the calibrating thread at once).  Calibration itself runs
# once, under _calibration_lock (re-entrant: a collection during calibration may
# view a tensor on the same thread).
cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define SV_LOAD_ACQUIRE_INT(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
    #define SV_STORE_RELEASE_INT(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
    #else  /* MSVC: volatile int accesses, with a full barrier on the store */
    #define SV_LOAD_ACQUIRE_INT(p) (*(volatile int *)(p))
    #define SV_STORE_RELEASE_INT(p, v) (MemoryBarrier(), *(volatile int *)(p) = (v))
    #endif
    """
    int _load_acquire "SV_LOAD_ACQUIRE_INT"(int *) noexcept nogil
    void _store_release "SV_STORE_RELEASE_INT"(int *, int) noexcept nogil

import _thread
cdef object _calibration_lock = _thread.RLock()


cdef inline int _bits_state() noexcept:
    """The calibration state, read with acquire ordering."""
    return _load_acquire(&_torch_bits_reader_state)
cdef Py_ssize_t _tensor_cdata_offset = 0  # where a tensor object holds its at::Tensor
cdef _TensorBit _read_is_neg = NULL
cdef _TensorBit _read_is_conj = NULL
cdef _ThreadFlag _torch_function_mode_enabled = NULL
# The mode check from torch's struct (see the opening comment): proven, allowed (a
# test switch), and both (the one flag the check tests).
cdef bint _torch_mode_state_ready = False
cdef bint _torch_mode_state_enabled = True
cdef bint _torch_mode_by_state = False
cdef object _torch_mode_state_symbol = _TORCH_MODE_STATE_SYMBOL  # what the next calibration resolves
cdef bint _torch_bits_direct_enabled = True  # a test switch
cdef object _torch_bit_symbols = _TORCH_BIT_SYMBOLS  # what the next calibration resolves
cdef object _torch_bits_library = None  # libtorch_cpu, as ctypes opened it (kept open)
# at::toDLPackNonOwning once calibrated and proven against the exchange API; NULL
# (the exchange API is called) before, or if anything there failed or disagreed.
cdef _CxxFill _fill_torch_dltensor = NULL
cdef bint _torch_layout_direct_enabled = True  # a test switch
cdef object _torch_layout_symbol = _TORCH_LAYOUT_SYMBOL  # what the next calibration resolves

cdef str _IS_NEG = "is_neg"
cdef str _IS_CONJ = "is_conj"
# torch.Tensor (its metaclass is torch's) and torch.Tensor.is_neg, once needed: each
# published once (_thread_state.pxi's _publish_once), is_neg first; borrowed after.
cdef PyObject *_torch_tensor_type = NULL
cdef PyObject *_torch_is_neg = NULL


cdef inline bint _torch_mode_active() noexcept nogil:
    """Whether a TorchFunctionMode would intercept a tensor method in this thread
    (torch's ``torch_function_mode_enabled()``); valid once the bits are calibrated
    "direct"."""
    if _torch_mode_by_state:
        return _torch_mode_enabled_in_state(_torch_mode_state())
    return _torch_function_mode_enabled()


def _torch_mode_reader():
    """How the TorchFunctionMode check is made now: "state" (torch's thread-local
    struct read in place), "function" (torch's ``torch_function_mode_enabled()``) or
    "uncalibrated"; for tests."""
    if _torch_bits_reader_state == _BITS_UNCALIBRATED:
        return "uncalibrated"
    return "state" if _torch_mode_by_state else "function"


def _set_torch_mode_state_enabled(bint enabled):
    """Allow (True) or forbid (False) the mode check from torch's struct; for tests."""
    global _torch_mode_state_enabled, _torch_mode_by_state
    _torch_mode_state_enabled = enabled
    _torch_mode_by_state = _torch_mode_state_ready and enabled


def _torch_mode_active_now():
    """_torch_mode_active() as the hot path asks it, in the calling thread (None before
    the bits are calibrated "direct"); for tests."""
    if _bits_state() != _BITS_DIRECT:
        return None
    return bool(_torch_mode_active())


def _torch_bits_reader():
    """How torch's negative and conjugate bits are read now: "direct" (in C, for the
    types that allow it), "methods" (``is_neg()``/``is_conj()`` on every tensor) or
    "uncalibrated" (no torch tensor checked yet); for tests."""
    if _torch_bits_reader_state == _BITS_UNCALIBRATED:
        return "uncalibrated"
    if _torch_bits_reader_state == _BITS_DIRECT and _torch_bits_direct_enabled:
        return "direct"
    return "methods"


def _set_torch_bits_direct_enabled(bint enabled):
    """Allow (True) or forbid (False) the direct read of torch's bits; for tests."""
    global _torch_bits_direct_enabled
    _torch_bits_direct_enabled = enabled
    _update_torch_lean(_torch_bits_reader_state)


# Whether the extension was built with _cxx_guard.cpp (setup.py leaves it out where
# no C++ compiler is found): without it torch's throwing C++ functions are never
# called, and torch tensors' layouts come from the exchange API.
_built_with_cxx_guard = bool(_HAVE_CXX_GUARD)


def _torch_layout_reader():
    """How a torch tensor's DLTensor is taken now: "stable abi" (torch's stable C ABI,
    the ``aoti_torch_get_*`` functions, on the tensor's at::Tensor), "direct" (``at::toDLPackNonOwning``
    on the tensor's at::Tensor, for the types that allow it), "exchange api" (torch's
    ``dltensor_from_py_object_no_sync``), "capsule" (a torch without the exchange API:
    ``__dlpack__``) or "uncalibrated"; for tests and the report."""
    if _torch_bits_reader_state == _BITS_UNCALIBRATED:
        return "uncalibrated"
    if _stable_layout_ready and _torch_layout_stable_enabled and _torch_layout_direct_enabled:
        return "stable abi"
    if _fill_torch_dltensor != NULL and _torch_layout_direct_enabled:
        return "direct"
    torch = _sys.modules.get("torch")
    if torch is not None and _look_up_type(torch.Tensor).dltensor_from_py_object == NULL:
        return "capsule"
    return "exchange api"


def _set_torch_layout_direct_enabled(bint enabled):
    """Allow (True) or forbid (False) the direct read of a torch tensor's DLTensor;
    for tests."""
    global _torch_layout_direct_enabled
    _torch_layout_direct_enabled = enabled
    _update_torch_lean(_torch_bits_reader_state)


def _reset_torch_bits_calibration(
    symbols=None, layout_symbol=None, getters=None, mode_state_symbol=None, hidden_dtypes=()
):
    """Forget the calibration, so the next torch tensor checked calibrates again,
    resolving ``symbols`` (is_neg, is_conj, torch_function_mode_enabled; torch's
    own when None), ``layout_symbol`` (toDLPackNonOwning when None), ``getters``
    (the stable ABI's eight getters, in _AOTI_GETTERS's order, when None) and
    ``mode_state_symbol`` (PythonTorchFunctionTLS::get_state when None), with the
    shim's dtype functions of ``hidden_dtypes`` taken as absent; for tests."""
    global _torch_bits_reader_state, _torch_bit_symbols, _torch_layout_symbol, _aoti_hidden_dtypes
    global _fill_torch_dltensor, _stable_layout_ready, _aoti_getters, _torch_fields_ready
    global _torch_storage_ready, _torch_storage_read
    global _torch_mode_state_ready, _torch_mode_by_state, _torch_mode_state_symbol
    _torch_bits_reader_state = _BITS_UNCALIBRATED
    _aoti_hidden_dtypes = tuple(hidden_dtypes)
    global _cdata_offset_proof
    _cdata_offset_proof = "none"
    _torch_mode_state_ready = False
    _torch_mode_by_state = False
    _torch_mode_state_symbol = (
        _TORCH_MODE_STATE_SYMBOL if mode_state_symbol is None else mode_state_symbol
    )
    _update_torch_lean(_BITS_UNCALIBRATED)
    _fill_torch_dltensor = NULL
    _stable_layout_ready = False
    _torch_fields_ready = False
    _torch_storage_ready = False
    _torch_storage_read = False
    _aoti_getters = _AOTI_GETTERS if getters is None else tuple(getters)
    _torch_bit_symbols = _TORCH_BIT_SYMBOLS if symbols is None else tuple(symbols)
    _torch_layout_symbol = _TORCH_LAYOUT_SYMBOL if layout_symbol is None else layout_symbol


cdef bint _torch_bits_readable_directly(object tp) except -1:
    """Whether a torch.Tensor subclass ``tp`` (or torch.Tensor) gets from its
    ``is_neg()`` and ``is_conj()`` exactly the bits of its TensorImpl.

    True when both methods, ``__getattribute__`` (which could intercept them) and
    ``__torch_function__`` (which handles them on a subclass) are torch.Tensor's own,
    or ``__torch_function__`` is torch's disabled one (torch.nn.Parameter's).  A
    TorchFunctionMode is checked on each read, not here.
    """
    torch = _sys.modules["torch"]
    tensor = torch.Tensor
    if not (
        _same_definition(tp, tensor, _IS_NEG)
        and _same_definition(tp, tensor, _IS_CONJ)
        and _same_definition(tp, tensor, "__getattribute__")
    ):
        return False
    handler = _defined_where(tp, "__torch_function__")[1]
    return handler is not None and (
        handler is _defined_where(tensor, "__torch_function__")[1]
        or handler is getattr(torch._C, "_disabled_torch_function_impl", None)
    )


cdef const void *_tensor_cdata(object tensor) noexcept:
    """The tensor object's own at::Tensor (valid once calibrated)."""
    return <const char *><PyObject *>tensor + _tensor_cdata_offset


cdef inline int _check_torch_bits(object tensor, _ProducerType info, int is_complex) except -1:
    """Refuse torch tensors whose memory does not hold their values.

    A tensor with the negative or the conjugate bit set is a lazy view: its memory
    holds the values before negation or conjugation.  torch's ``__dlpack__`` refuses
    the second and exports the first as if nothing were pending, and its exchange API
    exports both; a kernel would read wrong values either way.  Only complex tensors
    can carry the conjugate bit, so only they are asked (``is_complex`` -1: not
    known, read in C or asked of the tensor).  ``info`` is the tensor's
    ``_producer_type``.  The bits are read anew on every call (they can change in place).
    """
    cdef bint is_neg
    cdef bint is_conj = False
    if info.torch_bits_direct and _torch_bits_direct_enabled:
        if _bits_state() == _BITS_UNCALIBRATED:
            _calibrate_torch_bits()
        if _bits_state() == _BITS_DIRECT and not _torch_mode_active():
            is_neg = _read_is_neg(_tensor_cdata(tensor))
            if not is_neg and is_complex != 0:  # a C read: cheaper than asking the dtype
                is_conj = _read_is_conj(_tensor_cdata(tensor))
            if is_neg or is_conj:
                return _refuse_torch_bits(is_neg, is_conj)
            return 0
    if is_complex < 0:
        is_complex = tensor.is_complex()
    return _check_torch_bits_by_methods(tensor, is_complex)


cdef int _check_torch_bits_by_methods(object tensor, bint is_complex) except -1:
    """_check_torch_bits through the tensor's own ``is_neg()`` and ``is_conj()``."""
    cdef PyObject *args[1]
    args[0] = <PyObject *>tensor
    cdef PyObject *tensor_type = _load_published(&_torch_tensor_type)
    if tensor_type == NULL:
        torch_tensor = _sys.modules["torch"].Tensor
        _publish_once(&_torch_is_neg, torch_tensor.is_neg)  # before the type that guards it
        tensor_type = _publish_once(&_torch_tensor_type, torch_tensor)
    # An exact torch.Tensor is asked through torch's own method, found once (a
    # lookup through the MRO and the instance dict is a sixth of the check).
    if Py_TYPE_ptr(<PyObject *>tensor) == <void *>tensor_type:
        is_neg = PyObject_Vectorcall(<object>_torch_is_neg, args, 1, NULL)
    else:
        is_neg = PyObject_VectorcallMethod(_IS_NEG, args, 1, NULL)
    if is_neg:
        return _refuse_torch_bits(True, False)
    return _refuse_torch_bits(
        False, is_complex and PyObject_VectorcallMethod(_IS_CONJ, args, 1, NULL)
    )


cdef int _refuse_torch_bits(bint is_neg, bint is_conj) except -1:
    """Raise the error for the bit that is set (the negative bit first); 0 if none."""
    if is_neg:
        raise BufferError(
            "dlpack: the torch tensor has its negative bit set, so its memory does not hold "
            "its values (call .resolve_neg() first)"
        )
    if is_conj:
        raise BufferError(
            "dlpack: the torch tensor has its conjugate bit set, so its memory does not hold "
            "its values (call .resolve_conj() first)"
        )
    return 0


cdef int _calibrate_torch_bits() except -1:
    """Settle, once, how the bits are read: directly if every check passes, else by
    the methods.  An error there only means the methods are used (KeyboardInterrupt
    and the like still propagate, leaving it to the next tensor)."""
    cdef int state = _BITS_METHODS
    with _calibration_lock:
        if _bits_state() != _BITS_UNCALIBRATED:
            return 0  # another thread calibrated while this one waited
        try:
            if _calibrate_direct_read():
                state = _BITS_DIRECT
        except Exception:
            pass
        _update_torch_lean(state)
        _store_release(&_torch_bits_reader_state, state)
    return 0


cdef bint _calibrate_direct_read() except -1:
    """Find the at::Tensor's offset in a tensor object and torch's C functions, and
    prove both on probe tensors against the methods; True if all agree."""
    global _tensor_cdata_offset, _read_is_neg, _read_is_conj, _torch_function_mode_enabled
    global _torch_bits_library
    import ctypes
    import os

    torch = _sys.modules["torch"]
    # The library the running torch already loaded, never a second copy (RTLD_NOLOAD
    # fails if it is not loaded; the attribute is missing where dlopen is).
    library = ctypes.CDLL(
        os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"),
        mode=os.RTLD_NOLOAD | os.RTLD_NOW,
    )
    addresses = [ctypes.cast(library[name], ctypes.c_void_p).value for name in _torch_bit_symbols]
    if len(addresses) != 3 or not all(addresses):
        return False
    cdef _TensorBit read_neg = <_TensorBit><uintptr_t>addresses[0]
    cdef _TensorBit read_conj = <_TensorBit><uintptr_t>addresses[1]
    cdef _ThreadFlag mode_enabled = <_ThreadFlag><uintptr_t>addresses[2]
    cdef Py_ssize_t offset = -1

    mode_enabled_now = torch._C._is_torch_function_mode_enabled
    # With torch functions disabled, no TorchFunctionMode of the caller's can answer
    # for the probes' factories or methods, and torch says no mode is enabled.
    with torch._C.DisableTorchFunction():
        if mode_enabled() or mode_enabled_now():
            return False
        probes = _torch_bit_probes(torch)
        offset = _tensor_cdata_offset_of(torch.Tensor, probes)
        if offset < 0:
            return False
        proof = _prove_offset_by_shim(library, probes, offset)
        if proof is None:
            return False
        seen = set()
        for probe in probes:
            cdata = <const char *><PyObject *>probe + <Py_ssize_t>offset
            answers = (probe.is_neg(), probe.is_conj())
            if (read_neg(cdata), read_conj(cdata)) != answers:
                return False
            seen.add(answers)
        # Each bit seen set and clear (a function reading a constant fails here).
        if not {(True, False), (False, True), (False, False)} <= seen:
            return False
    # Under a mode of this thread's own, torch functions enabled (the caller may have
    # disabled them), torch and the function both say enabled.
    with torch._C._EnableTorchFunction(), _probe_torch_function_mode(torch):
        if not (mode_enabled_now() and mode_enabled()):
            return False
    _torch_bits_library = library
    _tensor_cdata_offset = offset
    global _cdata_offset_proof
    _cdata_offset_proof = proof
    _read_is_neg = read_neg
    _read_is_conj = read_conj
    _torch_function_mode_enabled = mode_enabled
    _calibrate_torch_mode_state(library, torch, mode_enabled)
    if not _calibrate_stable_layout(library, torch):
        _calibrate_direct_layout(library, torch)
    return True


cdef int _calibrate_direct_layout(object library, object torch) except -1:
    """Use ``at::toDLPackNonOwning`` (at the calibrated offset) if, on every layout
    probe, it lends exactly the DLTensor torch's exchange API lends, and fails where
    that fails; else leave the exchange API in use.  Needs the bits' calibration."""
    global _fill_torch_dltensor
    import ctypes

    cdef _ProducerType tensor_info = _look_up_type(torch.Tensor)
    cdef DLTensorFromPyObject lend = tensor_info.dltensor_from_py_object
    if lend == NULL or not _HAVE_CXX_GUARD:
        return 0
    try:
        address = ctypes.cast(library[_torch_layout_symbol], ctypes.c_void_p).value
        if not address:
            return 0
        # Real CPU tensors whatever the caller's context: torch functions (the
        # default device among them) and dispatch modes (FakeTensorMode) are off.
        from torch.utils._python_dispatch import _disable_current_modes
        with torch._C.DisableTorchFunction(), _disable_current_modes():
            probes = _torch_layout_probes(torch)
    except Exception:
        return 0  # no such function, or no probes: the exchange API stays
    cdef _CxxFill fill = <_CxxFill><uintptr_t>address
    cdef DLTensor direct, lent
    cdef int direct_failed, lent_failed
    failures = 0
    for probe in probes:
        if type(probe) is not tensor_info.described_type:
            return 0
        memset(&direct, 0, sizeof(DLTensor))
        memset(&lent, 0, sizeof(DLTensor))
        # Both read before any Python runs: the lent arrays are compared in place.
        direct_failed = _cxx_fill_guarded(fill, _tensor_cdata(probe), &direct)
        lent_failed = lend(<void *><PyObject *>probe, &lent)
        if lent_failed:
            PyErr_Clear()
        if direct_failed != lent_failed:
            return 0
        if lent_failed:
            failures += 1
        elif not _same_dltensor(&direct, &lent):
            return 0
    if failures != 1:  # exactly the sparse probe: a thrown error was caught
        return 0
    _fill_torch_dltensor = fill
    return 0


cdef bint _same_dltensor(const DLTensor *a, const DLTensor *b) noexcept:
    """Whether two DLTensors describe the same memory alike, field by field."""
    cdef int32_t ndim = a.ndim
    if not (
        a.data == b.data
        and a.device.device_type == b.device.device_type
        and a.device.device_id == b.device.device_id
        and ndim == b.ndim
        and a.dtype.code == b.dtype.code
        and a.dtype.bits == b.dtype.bits
        and a.dtype.lanes == b.dtype.lanes
        and a.byte_offset == b.byte_offset
        and (a.strides == NULL) == (b.strides == NULL)
    ):
        return False
    if ndim <= 0:
        return True
    if a.shape == NULL or b.shape == NULL:
        return False
    if memcmp(a.shape, b.shape, ndim * sizeof(int64_t)) != 0:
        return False
    return a.strides == NULL or memcmp(a.strides, b.strides, ndim * sizeof(int64_t)) == 0


cdef list _torch_layout_probes(object torch, frozenset shim_mapped=None):
    """Tensors of every layout, dtype and origin a view meets (each of torch.Tensor's
    own type), and one that both ways must refuse (a sparse tensor).  ``shim_mapped``:
    the further dtypes probed only where the stable ABI's shim maps them."""
    base = torch.arange(24.0).reshape(2, 3, 4)
    probes = [
        base,
        base[1:, ::2, 1:3],
        base.transpose(0, 2),
        base[:, :1].expand(2, 5, 4),  # stride 0
        base[0, 0, 1:2],
        torch.tensor(1.5),
        torch.empty(0, 3),
        torch.ones(2, 2, requires_grad=True),
        torch._neg_view(base),
        base.to(torch.complex64).conj(),
        torch.zeros(3, dtype=torch.bool),
        torch.zeros(3, dtype=torch.int8),
        torch.zeros(3, dtype=torch.uint8),
        torch.zeros(3, dtype=torch.int64),
        torch.zeros(3, dtype=torch.float16),
        torch.zeros(3, dtype=torch.bfloat16),
        torch.zeros(3, dtype=torch.complex128),
    ]
    # Every other dtype the stable-ABI reader maps, where this torch has it and its shim
    # maps it (a dtype the shim does not map is left to the general path, not probed).
    for name in (
        "int16", "int32", "uint16", "uint32", "uint64", "float32", "float64", "complex64",
        "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
    ):
        dtype = getattr(torch, name, None)
        if dtype is not None and (shim_mapped is None or name in shim_mapped):
            probes.append(torch.zeros(3, dtype=torch.float32).to(dtype)[1:])
    probes += [
        torch.zeros(4).to_sparse(),  # refused by both: torch throws
    ]
    numpy = _sys.modules.get("numpy")
    if numpy is not None:
        probes.append(torch.from_numpy(numpy.arange(4.0)[::2]))
    return probes


cdef bint _mode_state_agrees(
    object torch, const char *state, _ThreadFlag mode_enabled, int32_t disabled, bint enabled
) except -1:
    """Whether torch's struct at ``state`` holds ``disabled`` and as many stack entries
    (std::shared_ptr, two pointers each) as torch counts, and both its read and
    torch's function answer ``enabled``."""
    depth = torch._C._len_torch_function_stack()
    return (
        _TORCH_MODE_DISABLED(state) == disabled
        and _TORCH_MODE_STACK_BYTES(state) == <size_t>depth * 2 * sizeof(void *)
        and _torch_mode_enabled_in_state(state) == enabled
        and mode_enabled() == enabled
    )


cdef int _calibrate_torch_mode_state(
    object library, object torch, _ThreadFlag mode_enabled
) except -1:
    """Read the mode check from torch's struct (see the opening comment) if, in each of
    torch's states, the struct holds what the header says and the read answers what
    torch's function (``mode_enabled``, proven) answers; else leave the function in
    use.  Run by the bits' calibration, in its thread."""
    global _torch_mode_state_getter, _torch_mode_state_ready, _torch_mode_by_state
    import ctypes

    if not _HAVE_THREAD_LOCAL:
        return 0
    try:
        address = ctypes.cast(library[_torch_mode_state_symbol], ctypes.c_void_p).value
    except AttributeError:
        return 0  # not exported by this torch
    cdef _TorchModeStateFn getter = <_TorchModeStateFn><uintptr_t>address
    cdef const char *state = getter()
    if state == NULL or getter() != state:
        return 0
    # Torch functions enabled, as the caller left the stack (its own modes, or none),
    # a probe mode pushed on it, then each way of disabling them.
    with torch._C._EnableTorchFunction():
        depth = torch._C._len_torch_function_stack()
        if not _mode_state_agrees(torch, state, mode_enabled, 0, depth > 0):
            return 0
        with _probe_torch_function_mode(torch):
            if (
                torch._C._len_torch_function_stack() != depth + 1
                or not _mode_state_agrees(torch, state, mode_enabled, 0, True)
            ):
                return 0
            with torch._C.DisableTorchFunctionSubclass():
                if not _mode_state_agrees(torch, state, mode_enabled, 1, True):
                    return 0
            with torch._C.DisableTorchFunction():
                if not _mode_state_agrees(torch, state, mode_enabled, 2, False):
                    return 0
        if not _mode_state_agrees(torch, state, mode_enabled, 0, depth > 0):
            return 0
    _torch_mode_state_getter = getter
    _torch_mode_state_ready = True
    _torch_mode_by_state = _torch_mode_state_enabled
    return 0


def _probe_torch_function_mode(torch):
    """A TorchFunctionMode that only passes calls on (entered to see a mode enabled)."""
    class _ProbeMode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))
    return _ProbeMode()


cdef list _torch_bit_probes(object torch):
    """Tensors made in every way that matters to the layout and the bits: plain, a
    view, 0-d, a Parameter, from numpy, with the negative bit, with the conjugate bit,
    with both resolved."""
    base = torch.arange(6.0).reshape(2, 3)
    complex_base = base.to(torch.complex64)
    probes = [
        base,
        base[:, 1:],
        torch.tensor(1.5),
        torch.nn.Parameter(torch.ones(3)),
        torch._neg_view(base),
        torch._neg_view(base).t(),
        complex_base.conj(),
        complex_base.conj().imag,  # the negative bit, on a float view
        complex_base.conj().resolve_conj(),
        complex_base,
    ]
    numpy = _sys.modules.get("numpy")
    if numpy is not None:
        probes.append(torch.from_numpy(numpy.arange(4.0)))
    return probes


cdef object _prove_offset_by_shim(object library, list probes, Py_ssize_t offset):
    """Where torch exports its supported route from a Python tensor to a tensor handle
    (``torch_tensor_from_pyobject``: a new at::Tensor sharing the TensorImpl), every probe's
    handle names the TensorImpl the calibrated ``offset`` holds: "shim" then, None (the
    offset is not used) if one differs or the route fails; "probes" where torch lacks it
    (2.13 and older).  Each handle is deleted (aoti_torch_delete_tensor_object)."""
    import ctypes

    try:
        from_py = ctypes.cast(library["torch_tensor_from_pyobject"], ctypes.c_void_p).value
        delete = ctypes.cast(library["aoti_torch_delete_tensor_object"], ctypes.c_void_p).value
    except AttributeError:
        return "probes"
    if not from_py or not delete:
        return "probes"
    cdef _AotiFromPy wrap = <_AotiFromPy><uintptr_t>from_py
    cdef _AotiDelete drop = <_AotiDelete><uintptr_t>delete
    cdef void *handle
    cdef const void *impl
    for probe in probes:
        handle = NULL
        if wrap(<void *><PyObject *>probe, &handle) != 0 or handle == NULL:
            return None
        impl = (<const void **>handle)[0]
        drop(handle)
        if impl != (<const void **>(<const char *><PyObject *>probe + offset))[0]:
            return None
    return "shim"


def _torch_offset_proof():
    """How the calibrated at::Tensor offset was proven: "shim" (also against
    torch_tensor_from_pyobject), "probes" (against the methods alone: torch lacks it), or
    "none" (not calibrated, or not read directly); for tests and the report."""
    return _cdata_offset_proof


cdef Py_ssize_t _tensor_cdata_offset_of(object tensor_type, list probes) except -2:
    """The one offset, inside torch's C tensor object (PyObject_HEAD excluded), at
    which every probe holds its own TensorImpl address (``_cdata``); -1 if none or
    more than one."""
    cdef Py_ssize_t limit = 0
    for klass in tensor_type.__mro__:
        # The C base's size: fields past it are not torch's (the instance dict).
        if klass.__dictoffset__ == 0 and klass.__basicsize__ > limit and klass is not object:
            limit = klass.__basicsize__
    cdef Py_ssize_t offset, found = -1
    cdef Py_ssize_t first = sizeof(PyObject)
    cdef bint everywhere
    for offset in range(first, limit - <Py_ssize_t>sizeof(void *) + 1, sizeof(void *)):
        everywhere = True
        for probe in probes:
            word = <uintptr_t>(<void **>(<char *><PyObject *>probe + offset))[0]
            if word != <uintptr_t>probe._cdata:
                everywhere = False
                break
        if everywhere:
            if found >= 0:
                return -1
            found = offset
    return found
