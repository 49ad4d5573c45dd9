# Assigning to (or deleting) an attribute of a view: an AttributeError naming the
# attribute and the way out, where Python's own says only "readonly attribute".
#
# Installed as the type's tp_setattro at import, before any view exists, so that the
# class keeps no __setattr__/__delattr__ of its own (help() lists none) and every
# attribute read stays as fast as before: only stores and deletions come here.  An
# unknown name goes on to Python's generic store, which refuses it (a view has no
# __dict__) with its usual message.

cdef extern from "Python.h":
    ctypedef int (*_setattrofunc)(PyObject *, PyObject *, PyObject *) except -1
    ctypedef struct PyTypeObject_setattro "PyTypeObject":
        _setattrofunc tp_setattro
    int PyObject_GenericSetAttr(PyObject *, PyObject *, PyObject *) except -1


cdef int _view_setattro(PyObject *self, PyObject *name, PyObject *value) except -1:
    attribute = <object>name
    if isinstance(attribute, str) and hasattr(StridedMemoryView, attribute):
        action = "deleted" if value == NULL else f"assigned (got {type(<object>value).__name__!r})"
        raise AttributeError(
            f"StridedMemoryView.{attribute} is read-only and cannot be {action}: a view "
            "describes the memory it was made from; make another view instead "
            "(view.view(dtype=...), view.reshape(...), view[...] or StridedMemoryView(obj))"
        )
    return PyObject_GenericSetAttr(self, name, value)


cdef int _install_setattro() except -1:
    (<PyTypeObject_setattro *>StridedMemoryView).tp_setattro = _view_setattro
    PyType_Modified(<PyTypeObject_dict *>StridedMemoryView)
    return 0


_install_setattro()
