/* symbols.c — native frames with function, file and line (see symbols.h).
 *
 * Owns: a libdwfl session over this process's loaded objects, made per call
 * (objects load and unload between captures) and ended before returning;
 * libdw itself, opened at the first naming (dlopen), not linked: loading it
 * and what it needs (libelf, liblzma, libbz2) cost every start ~1 ms.
 * Never: runs in a signal handler or a hook; keeps pointers into libdw's
 * data past dwfl_end (every string is copied into a Python object first).
 */
#include "symbols.h"

#ifdef PP_HAVE_LIBDW
#include <dlfcn.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int pp_symbols_available(void) { return 1; }

#define PP_LIBDW "libdw.so.1"
#define PP_DW_FUNCTIONS(X)                                                                  \
    X(dwarf_attr) X(dwarf_attr_integrate) X(dwarf_filesrc) X(dwarf_formstring)               \
    X(dwarf_formudata) X(dwarf_getscopes) X(dwarf_getscopes_die) X(dwarf_getsrcfiles)        \
    X(dwarf_tag) X(dwfl_addrmodule) X(dwfl_begin) X(dwfl_end) X(dwfl_lineinfo)               \
    X(dwfl_linux_proc_find_elf) X(dwfl_linux_proc_report) X(dwfl_module_addrdie)             \
    X(dwfl_module_addrname) X(dwfl_module_getsrc) X(dwfl_report_begin) X(dwfl_report_end)    \
    X(dwfl_standard_find_debuginfo)

#define PP_DW_POINTER(f) __typeof__(f) *f;
static struct { PP_DW_FUNCTIONS(PP_DW_POINTER) } dw;
static int dw_state;                    /* 0: not tried, 1: open, -1: not there */

/* GIL held: libdw's functions, looked up once. 0, or -1 if it cannot be opened. */
static int dw_open(void)
{
    if (dw_state == 0) {
        void *h = dlopen(PP_LIBDW, RTLD_NOW | RTLD_LOCAL);
        int ok = h != NULL;
#define PP_DW_LOOKUP(f)                                                                     \
        if (ok) {                                                                           \
            void *sym = dlsym(h, #f);                                                       \
            ok = sym != NULL;                                                               \
            memcpy(&dw.f, &sym, sizeof sym);    /* object to function pointer: POSIX */     \
        }
        PP_DW_FUNCTIONS(PP_DW_LOOKUP)
#undef PP_DW_LOOKUP
        dw_state = ok ? 1 : -1;
    }
    return dw_state == 1 ? 0 : -1;
}

/* Below, each libdw call goes through the table. */
#define PP_DW_CALL(f) (*dw.f)
#define dwarf_attr PP_DW_CALL(dwarf_attr)
#define dwarf_attr_integrate PP_DW_CALL(dwarf_attr_integrate)
#define dwarf_filesrc PP_DW_CALL(dwarf_filesrc)
#define dwarf_formstring PP_DW_CALL(dwarf_formstring)
#define dwarf_formudata PP_DW_CALL(dwarf_formudata)
#define dwarf_getscopes PP_DW_CALL(dwarf_getscopes)
#define dwarf_getscopes_die PP_DW_CALL(dwarf_getscopes_die)
#define dwarf_getsrcfiles PP_DW_CALL(dwarf_getsrcfiles)
#define dwarf_tag PP_DW_CALL(dwarf_tag)
#define dwfl_addrmodule PP_DW_CALL(dwfl_addrmodule)
#define dwfl_begin PP_DW_CALL(dwfl_begin)
#define dwfl_end PP_DW_CALL(dwfl_end)
#define dwfl_lineinfo PP_DW_CALL(dwfl_lineinfo)
#define dwfl_linux_proc_find_elf PP_DW_CALL(dwfl_linux_proc_find_elf)
#define dwfl_linux_proc_report PP_DW_CALL(dwfl_linux_proc_report)
#define dwfl_module_addrdie PP_DW_CALL(dwfl_module_addrdie)
#define dwfl_module_addrname PP_DW_CALL(dwfl_module_addrname)
#define dwfl_module_getsrc PP_DW_CALL(dwfl_module_getsrc)
#define dwfl_report_begin PP_DW_CALL(dwfl_report_begin)
#define dwfl_report_end PP_DW_CALL(dwfl_report_end)
#define dwfl_standard_find_debuginfo PP_DW_CALL(dwfl_standard_find_debuginfo)

/* A DIE's name: its linkage (mangled) name where it has one, else its plain
 * name, following DW_AT_abstract_origin / DW_AT_specification. */
static const char *die_name(Dwarf_Die *die)
{
    Dwarf_Attribute a;
    const char *s = NULL;
    if (dwarf_attr_integrate(die, DW_AT_linkage_name, &a)
        || dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a))
        s = dwarf_formstring(&a);
    if (s == NULL && dwarf_attr_integrate(die, DW_AT_name, &a))
        s = dwarf_formstring(&a);
    return s;
}

static int add_frame(PyObject *list, const char *name, const char *file, long line)
{
    PyObject *t = Py_BuildValue("(ssl)", name ? name : "", file ? file : "", line);
    if (t == NULL)
        return -1;
    int rc = PyList_Append(list, t);
    Py_DECREF(t);
    return rc;
}

/* The frames of one address, appended to `out`: 0, or -1 on a Python error. */
static int frames_of(Dwfl *dwfl, Dwarf_Addr ip, PyObject *out)
{
    Dwfl_Module *mod = dwfl_addrmodule(dwfl, ip);
    if (mod == NULL)
        return 0;
    const char *sym = dwfl_module_addrname(mod, ip);
    const char *file = NULL;
    int line = 0;
    Dwfl_Line *ln = dwfl_module_getsrc(mod, ip);
    if (ln != NULL)
        file = dwfl_lineinfo(ln, NULL, &line, NULL, NULL, NULL);
    Dwarf_Addr bias = 0;
    Dwarf_Die *cu = dwfl_module_addrdie(mod, ip, &bias);
    Dwarf_Die *scopes = NULL;
    int n = cu ? dwarf_getscopes(cu, ip - bias, &scopes) : 0;
    /* Past an inlined instance dwarf_getscopes goes on with the inlined
     * function's own (abstract) scopes: its callers come from the concrete
     * chain above the instance (eu-addr2line -i does the same). */
    for (int i = 0; i < n; i++) {
        int tag = dwarf_tag(&scopes[i]);
        if (tag == DW_TAG_subprogram)
            break;
        if (tag == DW_TAG_inlined_subroutine) {
            Dwarf_Die *chain = NULL;
            int m = dwarf_getscopes_die(&scopes[i], &chain);
            free(scopes);
            scopes = chain;
            n = m > 0 ? m : 0;
            break;
        }
    }
    Dwarf_Files *files = NULL;
    size_t nfiles = 0;
    if (n > 0 && dwarf_getsrcfiles(cu, &files, &nfiles) != 0)
        files = NULL;
    int found = 0;
    for (int i = 0; i < n; i++) {
        int tag = dwarf_tag(&scopes[i]);
        if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram)
            continue;
        const char *name = die_name(&scopes[i]);
        if (add_frame(out, name ? name : sym, file, line) < 0) {
            free(scopes);
            return -1;
        }
        found = 1;
        if (tag == DW_TAG_subprogram)
            break;
        /* the next frame out runs at the inlined call's site */
        Dwarf_Attribute a;
        Dwarf_Word w;
        line = dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_line, &a), &w) == 0 ? (int)w : 0;
        file = files && dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_file, &a), &w) == 0
               && w < nfiles ? dwarf_filesrc(files, w, NULL, NULL) : NULL;
    }
    free(scopes);
    if (!found && sym != NULL)          /* no debug information: the symbol table */
        return add_frame(out, sym, file, line);
    return 0;
}

PyObject *pp_symbols_frames(PyObject *ips)
{
    if (dw_open() < 0)
        Py_RETURN_NONE;                 /* as without libdw: the callers fall back */
    PyObject *seq = PySequence_Fast(ips, "native_frames(ips): a sequence of addresses");
    if (seq == NULL)
        return NULL;
    static char *debuginfo_path = NULL;
    Dwfl_Callbacks cb = {.find_elf = dwfl_linux_proc_find_elf,
                         .find_debuginfo = dwfl_standard_find_debuginfo,
                         .debuginfo_path = &debuginfo_path};
    Dwfl *dwfl = dwfl_begin(&cb);
    PyObject *out = PyDict_New();
    if (dwfl == NULL || out == NULL)
        goto fail;
    dwfl_report_begin(dwfl);
    int rc = dwfl_linux_proc_report(dwfl, getpid());
    dwfl_report_end(dwfl, NULL, NULL);
    if (rc != 0) {
        PyErr_SetString(PyExc_OSError, "native_frames: cannot read this process's objects");
        goto fail;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *key = PySequence_Fast_GET_ITEM(seq, i);
        unsigned long long ip = PyLong_AsUnsignedLongLong(key);
        if (PyErr_Occurred())
            goto fail;
        PyObject *frames = PyList_New(0);
        if (frames == NULL || frames_of(dwfl, (Dwarf_Addr)ip, frames) < 0
            || (PyList_GET_SIZE(frames) && PyDict_SetItem(out, key, frames) < 0)) {
            Py_XDECREF(frames);
            goto fail;
        }
        Py_DECREF(frames);
    }
    dwfl_end(dwfl);
    Py_DECREF(seq);
    return out;
fail:
    if (dwfl)
        dwfl_end(dwfl);
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

#else

int pp_symbols_available(void) { return 0; }

PyObject *pp_symbols_frames(PyObject *ips)
{
    (void)ips;
    Py_RETURN_NONE;
}

#endif
