/* termguard.h — make sure a Python-level termination handler runs.
 *
 * pp_term_guard_install(sig), from the main thread after the Python handler
 * is set: wraps CPython's C handler; once the signal arrives it is re-sent to
 * this thread until the Python handler calls pp_term_guard_ack() (or, if it
 * never can, the default action is taken after a bound). Returns 1 installed,
 * 0 nothing to guard (default/ignored disposition, or not Linux), -1 errno.
 */
#ifndef PP_TERMGUARD_H
#define PP_TERMGUARD_H

int pp_term_guard_install(int signum);
void pp_term_guard_ack(void);

#endif
