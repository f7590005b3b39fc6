/* How kafkastore's C extensions declare their module (format/_native, _jsonl_native). */
#ifndef KAFKASTORE_PYMODULE_H
#define KAFKASTORE_PYMODULE_H

#include <Python.h>

/* A single-phase module named NAME with docstring DOC and METHODS (NULL-terminated),
 * no per-module state. */
#define KS_MODULE_DEF(VAR, NAME, DOC, METHODS)                                       \
    static struct PyModuleDef VAR = {                                                \
        PyModuleDef_HEAD_INIT, .m_name = (NAME), .m_doc = (DOC), .m_size = -1,       \
        .m_methods = (METHODS),                                                      \
    }

#endif
