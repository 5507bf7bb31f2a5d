/* registry.h — one profiler's function ids and what names them.
 *
 * Owns: the map key (code object or PyMethodDef pointer; a ghost's own key)
 * -> profile-wide function id, a strong reference to what names each id (a
 * code object, a builtin's name as cProfile spells it, or a ghost: the names
 * of a sampled code object destroyed before its samples were drained), and
 * the line-mode marks (line targets, the line filter). Every engine registers
 * here; none asks another engine for an id. pyprof's own code (its package's
 * files) and C functions (this module's) get no id: they are never recorded.
 * Never: called from a signal handler or an allocation hook (GIL held; it
 * allocates and may run the line filter, which is Python code).
 */
#ifndef PP_REGISTRY_H
#define PP_REGISTRY_H

#include "threads.h"

enum { PP_KIND_PYTHON = 0, PP_KIND_BUILTIN = 1, PP_KIND_GHOST = 2 };

typedef struct pp_registry {
    pp_index idx;
    PyObject **fobj;            /* code object (python), str name (builtin), tuple (ghost) */
    uint8_t *fkind;
    uint8_t *ftarget;           /* line mode: 1 for line targets */
    int32_t *fresume;           /* 3.11 line mode: offset of the first RESUME, -1 unknown */
    uint32_t nfun, capfun;
    uint64_t ghosts;
    pp_index own;               /* keys of pyprof's own code and C functions */
    PyObject *own_code;         /* list: keeps the own code objects (keys) alive */
    PyObject *line_filter;      /* line mode: code -> bool, asked once per new code object */
    /* line mode, while events are on: a function just became a line target */
    int (*on_target)(void *arg, PyObject *code);
    void *target_arg;
} pp_registry;

static inline uint32_t pp_registry_get(const pp_registry *r, uint64_t key)
{
    return pp_index_get(&r->idx, key);
}
/* The id of key, registered (naming it after obj) when new; PP_NONE when out
 * of memory or pyprof's own (pp_registry_own). obj: the code object, or the
 * C callable (self_arg: its bound self, if a descriptor). */
uint32_t pp_registry_add(pp_registry *r, uint64_t key, PyObject *obj, PyObject *self_arg,
                         int kind);
static inline uint32_t pp_registry_code(pp_registry *r, PyObject *code)
{
    return pp_registry_add(r, (uint64_t)(uintptr_t)code, code, NULL, PP_KIND_PYTHON);
}
/* key is pyprof's own code or C function, as pp_registry_add found it. */
static inline int pp_registry_own(const pp_registry *r, uint64_t key)
{
    return r->own.e != NULL && pp_index_get(&r->own, key) != PP_NONE;
}
/* A dying code object's names under a new id (its address will be reused);
 * PP_NONE for pyprof's own code. */
uint32_t pp_registry_ghost(pp_registry *r, PyObject *code);
/* A function that is no code object (an asyncio task's root frame, what a
 * task awaits): its names only, under a new id each call. */
uint32_t pp_registry_named(pp_registry *r, PyObject *filename, PyObject *name, int line);
/* Line mode: make `code` a line target; its id, or PP_NONE with an exception set. */
uint32_t pp_registry_add_line_target(pp_registry *r, PyObject *code);
void pp_registry_free(pp_registry *r);

#endif
