// Calls into C++ libraries that report failure by throwing.
//
// The rest of the extension is C (Cython's output): a C++ exception unwinding
// into a C frame ends the process.  Each function below calls one C++ function,
// found at run time (dlsym), through a pointer, and turns any exception it
// throws into a return value, so the C side can fall back to a path that
// reports the failure as a Python exception.

extern "C" {

// The C++ signature void f(const T &, U *), as the Itanium ABI passes it: a
// reference is a pointer.
typedef void (*sv_cxx_fill)(const void *source, void *out);

// f(*source, out); 0, or -1 if f threw (out may then be partly written).
int sv_cxx_fill_guarded(sv_cxx_fill f, const void *source, void *out)
{
    try {
        f(source, out);
        return 0;
    } catch (...) {
        return -1;
    }
}

}  // extern "C"
