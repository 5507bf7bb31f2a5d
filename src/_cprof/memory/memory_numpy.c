/* memory_numpy.c — NumPy's array data seen by the allocation hooks.
 *
 * NumPy (>= 1.22, NEP 49) allocates array data through a handler held in a
 * capsule named "mem_handler"; every array keeps the capsule it was made with
 * and frees through it. pyprof points NumPy's default capsule at a copy of
 * the handler whose functions record the block and call the original ones:
 * arrays made in any thread or context with the default handler are seen,
 * including those made before (their frees are unknown blocks). The structs
 * are NumPy's public, versioned ones (version 1), declared here so that
 * pyprof builds without NumPy.
 * Never: calls into Python from the handler functions; imports NumPy (the
 * Python side passes its C-API table when NumPy is imported).
 */
#include "memory_hooks.h"

typedef struct {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*realloc)(void *ctx, void *ptr, size_t new_size);
    void (*free)(void *ctx, void *ptr, size_t size);
} np_allocator;

typedef struct {
    char name[127];
    uint8_t version;
    np_allocator allocator;
} np_handler;

static np_handler np_orig, np_wrap;
static np_handler *np_orig_ptr;         /* the capsule's pointer before the patch */
static PyObject *np_capsule;            /* NumPy's default handler capsule, patched */

static void *np_malloc(void *ctx, size_t size)
{
    (void)ctx;
    if (pp_memory_pass_through(-1))
        return np_orig.allocator.malloc(np_orig.allocator.ctx, size);
    pp_mem_self = 1;
    void *ptr = np_orig.allocator.malloc(np_orig.allocator.ctx, size);
    if (ptr)
        pp_memory_note_alloc(ptr, size, 0);
    pp_mem_self = 0;
    return ptr;
}

static void *np_calloc(void *ctx, size_t nelem, size_t elsize)
{
    (void)ctx;
    if (pp_memory_pass_through(-1))
        return np_orig.allocator.calloc(np_orig.allocator.ctx, nelem, elsize);
    pp_mem_self = 1;
    void *ptr = np_orig.allocator.calloc(np_orig.allocator.ctx, nelem, elsize);
    if (ptr)
        pp_memory_note_alloc(ptr, nelem * elsize, 0);
    pp_mem_self = 0;
    return ptr;
}

static void *np_realloc(void *ctx, void *old, size_t size)
{
    (void)ctx;
    if (pp_memory_pass_through(-1))
        return np_orig.allocator.realloc(np_orig.allocator.ctx, old, size);
    pp_mem_self = 1;
    pp_memblock b;
    int had = old != NULL && pp_memory_take_block(old, &b);
    void *ptr = np_orig.allocator.realloc(np_orig.allocator.ctx, old, size);
    pp_memory_realloc_done(old, ptr, size, had ? &b : NULL, 0);
    pp_mem_self = 0;
    return ptr;
}

static void np_free(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    if (ptr != NULL && !pp_memory_pass_through(-1)) {
        pp_mem_self = 1;
        pp_memory_release_block(ptr);
        /* inside: with --native-allocs, the C free below is not seen again */
        np_orig.allocator.free(np_orig.allocator.ctx, ptr, size);
        pp_mem_self = 0;
        return;
    }
    np_orig.allocator.free(np_orig.allocator.ctx, ptr, size);
}

/* api: NumPy's C-API table capsule (_multiarray_umath._ARRAY_API). 1 if
 * patched (now or before), 0 if this NumPy has no handlers, -1 on error. */
int pp_memory_patch_numpy(PyObject *api)
{
    if (np_capsule != NULL)
        return 1;
    void **table = PyCapsule_GetPointer(api, NULL);
    if (table == NULL)
        return -1;
    unsigned int feature = ((unsigned int (*)(void))table[211])();
    if (feature < 0x0000000f)           /* NPY_1_22_API_VERSION: no NEP 49 */
        return 0;
    PyObject *cap = ((PyObject *(*)(void))table[305])();   /* PyDataMem_GetHandler */
    if (cap == NULL)
        return -1;
    np_handler *h = PyCapsule_GetPointer(cap, "mem_handler");
    if (h == NULL || h->version != 1) {
        Py_DECREF(cap);
        if (h == NULL)
            return -1;
        return 0;                       /* a handler layout this code does not know */
    }
    np_orig = *h;
    np_wrap = *h;                       /* same name: code may compare handler names */
    np_wrap.allocator = (np_allocator){NULL, np_malloc, np_calloc, np_realloc, np_free};
    if (PyCapsule_SetPointer(cap, &np_wrap) < 0) {
        Py_DECREF(cap);
        return -1;
    }
    np_orig_ptr = h;
    np_capsule = cap;                   /* kept patched until an uninstall (a detach) */
    return 1;
}

/* The capsule points at NumPy's handler again: arrays made meanwhile free
 * through it directly (ours only forwarded). GIL held. */
int pp_memory_unpatch_numpy(void)
{
    if (np_capsule == NULL)
        return 0;
    if (PyCapsule_SetPointer(np_capsule, np_orig_ptr) < 0) {
        PyErr_Clear();
        return -1;
    }
    Py_CLEAR(np_capsule);
    return 0;
}

