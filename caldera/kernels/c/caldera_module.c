/* caldera.kernels._caldera_layer: the CPython extension around caldera_layer.c (built by setup.py).

   Each function takes one argument struct (caldera_layer.h), passed as a buffer (a ctypes.Structure of
   caldera/kernels/native.py), copies it, and runs the kernel with the GIL released, so caldera/kernels/cpu.py can
   split rows over threads. The variant (_avx2 or _scalar) is chosen once at import from the CPU's features. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <string.h>

#include "caldera_layer.h"
#ifdef CALDERA_HAVE_AVX2_VARIANT
#include <cpuid.h>
#endif

typedef void (*mm_fn)(const caldera_mm_args *);
typedef void (*mm_t_fn)(const caldera_mm_t_args *);
typedef void (*layer_fn)(const caldera_layer_args *, int64_t, const float *, float *, float *);

static mm_fn mm_impl = caldera_codes_mm_scalar;
static mm_t_fn mm_t_impl = caldera_codes_mm_t_scalar;
static layer_fn layer_impl = caldera_layer_fwd_scalar;
static const char *isa = "scalar";

static int cpu_has_avx2(void) {
#if defined(CALDERA_HAVE_AVX2_VARIANT) && (defined(__GNUC__) || defined(__clang__))
  unsigned int eax, ebx, ecx, edx; /* F16C from CPUID leaf 1 (not every compiler's __builtin_cpu_supports names it) */
  __builtin_cpu_init();
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 29))) return 0;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return 0;
#endif
}

/* Point the entry points at `name`'s variant; 0 on success, -1 (ValueError set) when this CPU or build lacks it. */
static int use_isa(const char *name) {
  if (strcmp(name, "scalar") == 0) {
    mm_impl = caldera_codes_mm_scalar, mm_t_impl = caldera_codes_mm_t_scalar, layer_impl = caldera_layer_fwd_scalar;
    isa = "scalar";
    return 0;
  }
#ifdef CALDERA_HAVE_AVX2_VARIANT
  if (strcmp(name, "avx2") == 0 && cpu_has_avx2()) {
    mm_impl = caldera_codes_mm_avx2, mm_t_impl = caldera_codes_mm_t_avx2, layer_impl = caldera_layer_fwd_avx2;
    isa = "avx2";
    return 0;
  }
#endif
  PyErr_Format(PyExc_ValueError, "ISA %s: not available on this CPU or build (available: %s)", name,
               cpu_has_avx2() ? "avx2, scalar" : "scalar");
  return -1;
}

/* Copy the argument struct out of `obj` (any buffer of exactly `size` bytes). */
static int read_args(PyObject *obj, void *dst, size_t size, const char *what) {
  Py_buffer view;
  if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return -1;
  int ok = (size_t)view.len == size;
  if (ok) memcpy(dst, view.buf, size);
  else PyErr_Format(PyExc_ValueError, "%s: expected %zu bytes, got %zd", what, size, view.len);
  PyBuffer_Release(&view);
  return ok ? 0 : -1;
}

static int as_ptr(PyObject *o, void *out) {
  void *p = PyLong_AsVoidPtr(o);
  if (p == NULL && PyErr_Occurred()) return 0;
  *(void **)out = p;
  return 1;
}

/* NAME(args): copy the struct STRUCT out of the buffer `args`, run IMPL on it without the GIL */
#define STRUCT_CALL(NAME, STRUCT, IMPL)                          \
  static PyObject *NAME(PyObject *self, PyObject *arg) {         \
    STRUCT a;                                                    \
    if (read_args(arg, &a, sizeof a, #STRUCT) < 0) return NULL;  \
    Py_BEGIN_ALLOW_THREADS IMPL(&a);                             \
    Py_END_ALLOW_THREADS Py_RETURN_NONE;                         \
  }
STRUCT_CALL(codes_mm, caldera_mm_args, mm_impl)
STRUCT_CALL(codes_mm_t, caldera_mm_t_args, mm_t_impl)

static PyObject *layer_fwd(PyObject *self, PyObject *args) {
  PyObject *obj;
  long long B;
  void *x, *y, *work;
  caldera_layer_args a;
  if (!PyArg_ParseTuple(args, "OLO&O&O&", &obj, &B, as_ptr, &x, as_ptr, &y, as_ptr, &work)) return NULL;
  if (read_args(obj, &a, sizeof a, "caldera_layer_args") < 0) return NULL;
  Py_BEGIN_ALLOW_THREADS
  layer_impl(&a, (int64_t)B, (const float *)x, (float *)y, (float *)work);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

static PyObject *select_isa(PyObject *self, PyObject *arg) {
  const char *name = PyUnicode_AsUTF8(arg);
  if (name == NULL) return NULL;
  PyObject *before = PyUnicode_FromString(isa);
  if (before == NULL || use_isa(name) < 0) {
    Py_XDECREF(before);
    return NULL;
  }
  return before;
}

static PyObject *get_isa(PyObject *self, PyObject *unused) { return PyUnicode_FromString(isa); }

/* {struct: {"sizeof": n, field: (offset, size), ...}}, checked against the ctypes mirror by native.py */
#define FIELD(S, f) {#S, #f, offsetof(S, f), sizeof(((S *)0)->f)}
static const struct {
  const char *s, *f;
  size_t off, size;
} fields[] = {
    FIELD(caldera_mm_args, x), FIELD(caldera_mm_args, y), FIELD(caldera_mm_args, codes), FIELD(caldera_mm_args, T),
    FIELD(caldera_mm_args, scale), FIELD(caldera_mm_args, B), FIELD(caldera_mm_args, n), FIELD(caldera_mm_args, m),
    FIELD(caldera_mm_args, r0), FIELD(caldera_mm_args, r1), FIELD(caldera_mm_args, width),
    FIELD(caldera_mm_args, stages), FIELD(caldera_mm_args, per_row), FIELD(caldera_mm_args, inv_rs),
    FIELD(caldera_mm_t_args, t), FIELD(caldera_mm_t_args, y), FIELD(caldera_mm_t_args, codes),
    FIELD(caldera_mm_t_args, T), FIELD(caldera_mm_t_args, B), FIELD(caldera_mm_t_args, k), FIELD(caldera_mm_t_args, m),
    FIELD(caldera_mm_t_args, j0), FIELD(caldera_mm_t_args, j1), FIELD(caldera_mm_t_args, width),
    FIELD(caldera_mm_t_args, stages), FIELD(caldera_mm_t_args, inv_rs), FIELD(caldera_mm_t_args, scale),
    FIELD(caldera_layer_args, su), FIELD(caldera_layer_args, sv), FIELD(caldera_layer_args, Md),
    FIELD(caldera_layer_args, Mn), FIELD(caldera_layer_args, qc), FIELD(caldera_layer_args, qs),
    FIELD(caldera_layer_args, T), FIELD(caldera_layer_args, Lp), FIELD(caldera_layer_args, Rp),
    FIELD(caldera_layer_args, Lft), FIELD(caldera_layer_args, Rft), FIELD(caldera_layer_args, bias),
    FIELD(caldera_layer_args, d), FIELD(caldera_layer_args, n), FIELD(caldera_layer_args, Kd),
    FIELD(caldera_layer_args, Kn), FIELD(caldera_layer_args, k), FIELD(caldera_layer_args, r),
    FIELD(caldera_layer_args, qw), FIELD(caldera_layer_args, q_per_row), FIELD(caldera_layer_args, lr_mode),
    FIELD(caldera_layer_args, lrw), FIELD(caldera_layer_args, stages), FIELD(caldera_layer_args, inv_rs),
    FIELD(caldera_layer_args, ls), FIELD(caldera_layer_args, rs),
};
static const struct {
  const char *s;
  size_t size;
} structs[] = {{"caldera_mm_args", sizeof(caldera_mm_args)},
               {"caldera_mm_t_args", sizeof(caldera_mm_t_args)},
               {"caldera_layer_args", sizeof(caldera_layer_args)}};

static PyObject *layout(void) {
  PyObject *out = PyDict_New();
  for (size_t i = 0; out && i < sizeof structs / sizeof structs[0]; i++) {
    PyObject *d = Py_BuildValue("{s:n}", "sizeof", (Py_ssize_t)structs[i].size);
    if (d == NULL || PyDict_SetItemString(out, structs[i].s, d) < 0) Py_CLEAR(out);
    Py_XDECREF(d);
  }
  for (size_t i = 0; out && i < sizeof fields / sizeof fields[0]; i++) {
    PyObject *v = Py_BuildValue("(nn)", (Py_ssize_t)fields[i].off, (Py_ssize_t)fields[i].size);
    if (v == NULL || PyDict_SetItemString(PyDict_GetItemString(out, fields[i].s), fields[i].f, v) < 0) Py_CLEAR(out);
    Py_XDECREF(v);
  }
  return out;
}

static PyMethodDef methods[] = {
    {"codes_mm", codes_mm, METH_O, "codes_mm(caldera_mm_args): y = x (s Q[r0:r1])^T from codes (GIL released)"},
    {"codes_mm_t", codes_mm_t, METH_O, "codes_mm_t(caldera_mm_t_args): y[:, 8j0:8j1] += t (s M)[:, 8j0:8j1]"},
    {"layer_fwd", layer_fwd, METH_VARARGS, "layer_fwd(caldera_layer_args, B, x, y, work): one layer forward"},
    {"select_isa", select_isa, METH_O, "select_isa('avx2' | 'scalar'): use that variant; returns the previous one"},
    {"isa", get_isa, METH_NOARGS, "isa(): the variant in use, 'avx2' or 'scalar'"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_caldera_layer",
                                    "CALDERA CPU kernels (caldera/kernels/c/caldera_layer.c); see caldera.kernels.native",
                                    -1, methods};

PyMODINIT_FUNC PyInit__caldera_layer(void) {
  PyObject *m = PyModule_Create(&module);
  if (m == NULL) return NULL;
  if (cpu_has_avx2()) use_isa("avx2");
  PyObject *lay = layout();
  if (lay == NULL || PyModule_AddObject(m, "LAYOUT", lay) < 0) {
    Py_XDECREF(lay);
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
