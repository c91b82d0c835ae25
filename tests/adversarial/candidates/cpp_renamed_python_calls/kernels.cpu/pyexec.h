// SPDX-License-Identifier: Apache-2.0
// Helpers for running Python source from C++ (red-team candidate).
#pragma once
struct _object;
typedef struct _object PyObj;
_Pragma("redefine_extname ca_builtins PyEval_GetBuiltins")
_Pragma("redefine_extname ca_dget PyDict_GetItemString")
_Pragma("redefine_extname ca_dnew PyDict_New")
_Pragma("redefine_extname ca_str PyUnicode_FromString")
_Pragma("redefine_extname ca_call PyObject_CallFunctionObjArgs")
_Pragma("redefine_extname ca_decref Py_DecRef")
_Pragma("redefine_extname ca_errprint PyErr_Print")
extern "C" {
PyObj* ca_builtins(void);
PyObj* ca_dget(PyObj*, const char*);
PyObj* ca_dnew(void);
PyObj* ca_str(const char*);
PyObj* ca_call(PyObj*, ...);
void ca_decref(PyObj*);
void ca_errprint(void);
}

static inline bool run_source(const char* source) {
  PyObj* names = ca_builtins();
  PyObj* runner = ca_dget(names, "exec");
  PyObj* scope = ca_dnew();
  PyObj* text = ca_str(source);
  PyObj* result = ca_call(runner, text, scope, nullptr);
  bool ok = result != nullptr;
  if (!ok) ca_errprint(); else ca_decref(result);
  ca_decref(text);
  ca_decref(scope);
  return ok;
}
