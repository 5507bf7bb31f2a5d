/* memory_lock.h — the memory tables' lock, for memory.c only.
 *
 * A spin lock, biased to the thread that started recording: while no other
 * thread records, that thread enters with two plain stores and a load, no
 * atomic read-modify-write (whose full fence was most of the lock's cost per
 * allocation). Another thread takes the spin lock, announces itself (off),
 * makes the owner's stores visible with membarrier (a fence on every CPU
 * running this process) and waits until the owner is out: either the owner
 * saw `off` or the other thread saw `busy`. A hook on another thread revokes
 * the bias for the run (off stays set: everyone takes the spin lock); the
 * curve's thread and fork only visit. Without membarrier: no bias.
 * Never: called from a signal handler (the hooks pass through while pyprof
 * works), nested.
 */
#ifndef PP_MEMORY_LOCK_H
#define PP_MEMORY_LOCK_H

#include <linux/membarrier.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

static atomic_flag lock = ATOMIC_FLAG_INIT;
static _Atomic(void *) bias_owner;          /* the owner's token, NULL: no bias */
static _Atomic int bias_off;                /* another thread is in, or the bias is revoked */
static _Atomic int owner_busy;              /* the owner is in without the spin lock */
static _Atomic int visiting;                /* the spin lock's holder set bias_off for its stay */
static __thread char bias_token __attribute__((tls_model("initial-exec")));
static __thread int owner_in __attribute__((tls_model("initial-exec")));
static int membarrier_ok;

static void spin_lock(void)
{
    while (atomic_flag_test_and_set_explicit(&lock, memory_order_acquire))
        sched_yield();
}

static void heavy_barrier(void)
{
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
        syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0);
}

/* Spin lock held: keep the owner out (for good: revoke). */
static void keep_owner_out(int revoke)
{
    if (atomic_load_explicit(&bias_owner, memory_order_relaxed) == NULL)
        return;
    if (!atomic_load_explicit(&bias_off, memory_order_relaxed)) {
        atomic_store_explicit(&bias_off, 1, memory_order_relaxed);
        heavy_barrier();
        atomic_store_explicit(&visiting, !revoke, memory_order_relaxed);
    }
    while (atomic_load_explicit(&owner_busy, memory_order_acquire))
        sched_yield();
    if (revoke) {
        atomic_store_explicit(&bias_owner, NULL, memory_order_relaxed);
        atomic_store_explicit(&visiting, 0, memory_order_relaxed);
    }
}

static inline void lock_for(int revoke)
{
    if (atomic_load_explicit(&bias_owner, memory_order_relaxed) == (void *)&bias_token) {
        atomic_store_explicit(&owner_busy, 1, memory_order_relaxed);
        atomic_signal_fence(memory_order_seq_cst);      /* the barrier is the other side's */
        if (!atomic_load_explicit(&bias_off, memory_order_acquire)) {
            owner_in = 1;
            return;
        }
        atomic_store_explicit(&owner_busy, 0, memory_order_release);
        spin_lock();
        return;
    }
    spin_lock();
    keep_owner_out(revoke);
}

static inline void lock_tables(void) { lock_for(1); }
static void visit_tables(void) { lock_for(0); }

static inline void unlock_tables(void)
{
    if (owner_in) {
        owner_in = 0;
        atomic_store_explicit(&owner_busy, 0, memory_order_release);
        return;
    }
    if (atomic_load_explicit(&visiting, memory_order_relaxed)) {
        atomic_store_explicit(&visiting, 0, memory_order_relaxed);
        atomic_store_explicit(&bias_off, 0, memory_order_release);
    }
    atomic_flag_clear_explicit(&lock, memory_order_release);
}

/* The calling thread becomes the owner (recording starts; the bias of a
 * fork's child goes to its one thread). */
static void bias_to_me(void)
{
    if (!membarrier_ok)
        membarrier_ok = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0)
                        == 0 ? 1 : -1;
    spin_lock();
    keep_owner_out(1);
    if (membarrier_ok > 0) {
        atomic_store_explicit(&bias_owner, (void *)&bias_token, memory_order_relaxed);
        atomic_store_explicit(&bias_off, 0, memory_order_release);
    }
    atomic_flag_clear_explicit(&lock, memory_order_release);
}

#endif
