/* Which host allocations a PyTorch process makes, and which of them glibc serves with mmap.
 *
 *     gcc -O2 -shared -fPIC -o malloc_log.so validation/malloc_log.c -ldl
 *     MALLOC_LOG=OUT.log LD_PRELOAD=$PWD/malloc_log.so python3 validation/hf_cases.py ...
 *
 * (validation/malloc_log.sh builds it and runs it over a case list.) An LD_PRELOAD library that
 * passes malloc, calloc, realloc, the aligned forms and free on to glibc's own entry points
 * (`__libc_malloc` ...), so that glibc's decisions are the ones it makes unobserved, and writes
 * one line per call of MALLOC_LOG_MIN bytes or more (default 64 KiB) to the file MALLOC_LOG:
 *
 *     m SIZE PTR CHUNK FLAG CALLER     malloc-family call: the request, the pointer, the chunk's
 *                                      size from its header, FLAG 1 if glibc mmapped it
 *                                      (IS_MMAPPED, bit 1 of the header), the caller's library
 *     f PTR CHUNK FLAG CALLER          free of such a chunk
 *     M ADDR LEN PROT FLAGS CALLER     an mmap a library made itself (glibc's own are not seen)
 *     U ADDR LEN CALLER                a munmap likewise
 *     # LABEL                          vramscope_mark(LABEL): hf_cases.py's checkpoints (phase
 *                                      ends, and every aten op with VA_MAPS_OPS)
 *
 * Nothing here allocates: lines are formatted on the stack and written with write(2), so the
 * log does not move what it records. A frees' line is written before the chunk goes back.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static int log_fd = -1;
static size_t log_min = 64 * 1024;
/* initial-exec: the global-dynamic model may call malloc to make a new thread's block, inside malloc */
static __thread int inside __attribute__((tls_model("initial-exec")));

__attribute__((constructor)) static void init(void) {
    const char *path = getenv("MALLOC_LOG");
    const char *min = getenv("MALLOC_LOG_MIN");
    if (min) log_min = strtoull(min, NULL, 10);
    if (path) log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    /* this process only: a child would append to the same log */
    unsetenv("LD_PRELOAD");
    unsetenv("MALLOC_LOG");
}

static const char *lib_of(const void *pc) {
    Dl_info info;
    if (pc && dladdr(pc, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        return slash ? slash + 1 : info.dli_fname;
    }
    return "?";
}

static void put(const char *line, int n) {
    if (log_fd >= 0 && n > 0) {
        ssize_t r = write(log_fd, line, (size_t)n < 512 ? (size_t)n : 511);
        (void)r;
    }
}

static size_t chunk_of(void *p, int *mmapped) {
    size_t h = ((size_t *)p)[-1];
    *mmapped = (h & 2) != 0;
    return h & ~(size_t)7;
}

static void *logged(void *p, size_t size, const void *pc) {
    if (p && size >= log_min && log_fd >= 0 && !inside) {
        inside = 1;
        int mm;
        size_t chunk = chunk_of(p, &mm);
        char line[512];
        int n = snprintf(line, sizeof line, "m %zu %p %zu %d %s\n", size, p, chunk, mm, lib_of(pc));
        put(line, n);
        inside = 0;
    }
    return p;
}

void *malloc(size_t size) {
    return logged(__libc_malloc(size), size, __builtin_return_address(0));
}

void *calloc(size_t n, size_t size) {
    return logged(__libc_calloc(n, size), n * size, __builtin_return_address(0));
}

/* An `f` line for a chunk about to go back: `pc` the caller of free, or NULL for realloc's. */
static void log_free(void *p, const void *pc) {
    if (p && log_fd >= 0 && !inside) {
        int mm;
        size_t chunk = chunk_of(p, &mm);
        if (chunk >= log_min) {
            inside = 1;
            char line[512];
            int n = snprintf(line, sizeof line, "f %p %zu %d %s\n", p, chunk, mm,
                             pc ? lib_of(pc) : "realloc");
            put(line, n);
            inside = 0;
        }
    }
}

void free(void *p) {
    log_free(p, __builtin_return_address(0));
    __libc_free(p);
}

void *realloc(void *p, size_t size) {
    log_free(p, NULL);
    return logged(__libc_realloc(p, size), size, __builtin_return_address(0));
}

void *memalign(size_t align, size_t size) {
    return logged(__libc_memalign(align, size), size, __builtin_return_address(0));
}

void *aligned_alloc(size_t align, size_t size) {
    return logged(__libc_memalign(align, size), size, __builtin_return_address(0));
}

int posix_memalign(void **out, size_t align, size_t size) {
    void *p = __libc_memalign(align, size);
    if (!p) return 12; /* ENOMEM */
    *out = logged(p, size, __builtin_return_address(0));
    return 0;
}

void *valloc(size_t size) {
    return logged(__libc_memalign(4096, size), size, __builtin_return_address(0));
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    void *p = (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
    if (p != MAP_FAILED && len >= log_min && log_fd >= 0 && !inside && (flags & MAP_ANONYMOUS)) {
        inside = 1;
        char line[512];
        int n = snprintf(line, sizeof line, "M %p %zu %d %d %s\n", p, len, prot, flags,
                         lib_of(__builtin_return_address(0)));
        put(line, n);
        inside = 0;
    }
    return p;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
    __attribute__((alias("mmap")));

int munmap(void *addr, size_t len) {
    if (len >= log_min && log_fd >= 0 && !inside) {
        inside = 1;
        char line[512];
        int n = snprintf(line, sizeof line, "U %p %zu %s\n", addr, len,
                         lib_of(__builtin_return_address(0)));
        put(line, n);
        inside = 0;
    }
    return (int)syscall(SYS_munmap, addr, len);
}

void vramscope_mark(const char *label) {
    char line[512];
    int n = snprintf(line, sizeof line, "# %s\n", label);
    put(line, n);
}
