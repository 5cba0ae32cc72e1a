// Clang's thread-safety annotations, so that the compiler checks which mutex guards which
// field and which function expects which lock to be held.
//
// A clang build (-Wthread-safety, see CMakeLists.txt) turns a field read without its
// GUARDED_BY mutex, or a *Locked helper called without its REQUIRES mutex, into a compile
// error. Other compilers see empty macros. The mutex type that carries the capability is
// objfs::Mutex (backend/mutex.h); fs/lock_order.h says in which order the mutexes are taken.
#pragma once

#if defined(__clang__)
#define OBJFS_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define OBJFS_THREAD_ANNOTATION(x)
#endif

// On a class: its objects are capabilities (locks) of the given kind, e.g. "mutex".
#define CAPABILITY(x) OBJFS_THREAD_ANNOTATION(capability(x))
// On an RAII class whose constructor acquires and destructor releases a capability.
#define SCOPED_CAPABILITY OBJFS_THREAD_ANNOTATION(scoped_lockable)
// On a field: it may only be read or written with `x` held.
#define GUARDED_BY(x) OBJFS_THREAD_ANNOTATION(guarded_by(x))
// On a pointer field: what it points to may only be used with `x` held.
#define PT_GUARDED_BY(x) OBJFS_THREAD_ANNOTATION(pt_guarded_by(x))
// On a mutex: it is taken after (or before) the named ones, never the other way round.
#define ACQUIRED_AFTER(...) OBJFS_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define ACQUIRED_BEFORE(...) OBJFS_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
// On a function: the caller must hold (or must not hold) the named capabilities.
#define REQUIRES(...) OBJFS_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) OBJFS_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// On a function: it acquires, releases or try-acquires the named capabilities (`this` if none).
#define ACQUIRE(...) OBJFS_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) OBJFS_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) OBJFS_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// On a function: it checks at run time that the capability is held; the analysis trusts it.
#define ASSERT_CAPABILITY(x) OBJFS_THREAD_ANNOTATION(assert_capability(x))
// On a function: it returns the given capability (e.g. a lock chosen by key).
#define RETURN_CAPABILITY(x) OBJFS_THREAD_ANNOTATION(lock_returned(x))
// On a function: not checked. Each use says why the analysis cannot follow it.
#define NO_THREAD_SAFETY_ANALYSIS OBJFS_THREAD_ANNOTATION(no_thread_safety_analysis)
