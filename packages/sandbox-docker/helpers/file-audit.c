/*
 * proctor-file-audit: which files the processes of one container open, execute and write, seen
 * from the host with fanotify. Built on first use by @proctor/sandbox-docker (cc -O2) and run as
 * root on the Docker host.
 *
 *   proctor-file-audit --probe           exit 0 when this kernel and user can audit, else say why
 *   proctor-file-audit <init-pid>        audit the container whose init has host pid <init-pid>
 *
 * Mechanism. One fanotify group (FAN_CLASS_CONTENT, unlimited queue) marks the superblock of the
 * container's root filesystem, reached as /proc/<init-pid>/root, which must be an overlay mount
 * (so an exited container whose pid was reused by a host process can never make us mark the
 * host's root). Bind mounts and volumes are other superblocks: not audited. Events:
 *   FAN_OPEN                       -> access "open"
 *   FAN_OPEN_EXEC(_PERM)           -> access "exec"
 *   FAN_MODIFY, FAN_CLOSE_WRITE    -> access "write" (modified, or closed after opening for write)
 * Every event names its file through an fd the kernel opens for us (FMODE_NONOTIFY: our own
 * opens make no events); readlink(/proc/self/fd/N) gives its path in the container's mount
 * namespace. Events carry the host pid of the process that caused them.
 *
 * Processes. FAN_OPEN_EXEC_PERM blocks an execve until we answer, so a process that execs is
 * read from /proc (parent, start time, pid namespace) while it cannot exit; every other process
 * (a fork that never execs, or one whose exec was of a file on another filesystem) is read when
 * its first event is handled, and is recorded as "gone" with nothing but its pid when it has
 * already exited. A parent is resolved the same way, recursively. Processes alive when the audit
 * starts are listed first ("before").
 *   Pid reuse (pid_max is often 32768): a record's pid is trusted for later events only while
 * the host's pid counter (/proc/sys/kernel/ns_last_pid, sampled after every read and every
 * 100 ms) has not come round to that pid since the process was last seen alive; otherwise
 * /proc is read again, and an event that cannot be told apart (the pid now belongs to another
 * process, or to none) goes to a new "gone" record and counts as ambiguous. This holds as long
 * as the counter only moves forward and less than a whole cycle between two samples: true of
 * forks; only root on the host can set it back (writing ns_last_pid, as CRIU does).
 *   A process is the same one while its pid and its start time (clock ticks) are.
 *
 * Never hangs the container: every permission event is answered FAN_ALLOW whatever happens,
 * after reads of /proc that take no lock an exec'ing task holds (stat, status, ns/pid, exe).
 * If this process dies, the kernel allows every pending permission event when the group's fd
 * is closed. The report is written only after the group is closed, so a slow reader of our
 * stdout can never hold up an exec in the container.
 *
 * Protocol. stdout: "ready <st_dev of the marked root> <processes alive>" once marked; the
 * report when stdin ends (EOF is the stop signal, so an owner that dies stops us too):
 *   P <id> <pid> <container pid|-> <b|n|g> <ppid|-> <parent id|-> <orphaned 0|1> <exe|->
 *   A <o|x|w> <process id> <path>     (path: "@<host path>" when opened through a mount the
 *                                      container does not have: a host process, e.g. the daemon)
 *   C <events> <unnamed> <ambiguous> <overflows>
 *   END
 * Paths escape bytes <= 0x20, 0x7f and '%' as %XX. Errors: one line on stderr, exit 2.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#ifndef FAN_REPORT_FD_ERROR
#define FAN_REPORT_FD_ERROR 0x00002000
#endif
#ifndef STATX_MNT_ID
#define STATX_MNT_ID 0x00001000U
#endif
#define OVERLAYFS_SUPER_MAGIC 0x794c7630
#define MASK (FAN_OPEN | FAN_OPEN_EXEC | FAN_OPEN_EXEC_PERM | FAN_MODIFY | FAN_CLOSE_WRITE)

static void die(const char *what, int err) {
  fprintf(stderr, "%s: %s\n", what, strerror(err));
  exit(2);
}

static void *grow(void *p, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return p;
  size_t n = *cap ? *cap : 64;
  while (n < need) n *= 2;
  p = realloc(p, n * size);
  if (!p) die("memory", ENOMEM);
  *cap = n;
  return p;
}

/* ---- /proc ---- */

static int read_text(const char *path, char *buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n < 0) return -1;
  buf[n] = 0;
  return (int)n;
}

static int link_text(const char *path, char *buf, size_t size) {
  ssize_t n = readlink(path, buf, size - 1);
  if (n < 0) return -1;
  buf[n] = 0;
  return 0;
}

/* Parent pid and start time (clock ticks after boot) from /proc/<pid>/stat. */
static int read_stat(int pid, int *ppid, unsigned long long *start) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  if (read_text(path, buf, sizeof buf) < 0) return -1;
  char *p = strrchr(buf, ')'); /* comm may hold spaces and parentheses */
  if (!p) return -1;
  /* state ppid, 17 fields, starttime (field 22) */
  if (sscanf(p + 2, "%*c %d %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu", ppid, start) != 2) return -1;
  return 0;
}

/* ---- the host's pid counter, to tell when a pid may have changed hands ---- */

static int pid_max, lastpid_fd = -1, last_pid;
static long long swept; /* how far the counter has moved since the audit began */

static int sample_counter(void) {
  char buf[32];
  ssize_t n = pread(lastpid_fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return last_pid;
  buf[n] = 0;
  int now = atoi(buf), before = last_pid;
  swept += ((long long)now - before + pid_max) % pid_max;
  last_pid = now;
  return before;
}

/* ---- process records ---- */

typedef struct {
  int pid, cpid, ppid, parent; /* cpid, ppid, parent: -1 when unknown or not in the container */
  char origin;                 /* 'b' alive at the start, 'n' new, 'g' gone when first seen */
  char orphaned;
  unsigned long long start;
  int seen_pid;                /* the counter's value ... */
  long long seen_swept;        /* ... and progress when the process was last known to hold its pid */
  char *exe;
} proc_t;

static proc_t *procs;
static size_t nprocs, capprocs;
static int *by_pid; /* pid -> record id + 1 */
static int init_pid;
static char container_ns[64];
static char origin_new = 'b'; /* 'b' while listing the processes alive at the start */
static unsigned long long unnamed, ambiguous, overflows, events;

static void mark_seen(proc_t *p) {
  p->seen_pid = last_pid;
  p->seen_swept = swept;
}

/* Whether the counter has come round to p's pid since p was last known to hold it. */
static int maybe_reused(const proc_t *p) {
  long long distance = ((long long)p->pid - p->seen_pid + pid_max) % pid_max;
  return swept - p->seen_swept >= (distance ? distance : pid_max);
}

static int add_proc(int pid, char origin) {
  procs = grow(procs, &capprocs, nprocs + 1, sizeof *procs);
  proc_t *p = &procs[nprocs];
  memset(p, 0, sizeof *p);
  p->pid = pid;
  p->cpid = p->ppid = p->parent = -1;
  p->origin = origin;
  mark_seen(p);
  by_pid[pid] = (int)nprocs + 1;
  return (int)nprocs++;
}

static int process_of(int pid, int depth, const char *exec_path, int blocked);
static void sample(void);

/*
 * A record for the process now holding `pid`, read from /proc between two reads of its stat
 * (same start time: nothing read in between belongs to a process that took over the pid).
 */
static int learn(int pid, int depth, const char *exec_path) {
  char path[64], buf[4096];
  int ppid, ppid2;
  unsigned long long start, start2;
  if (read_stat(pid, &ppid, &start) < 0) return depth > 0 ? -1 : add_proc(pid, 'g');
  snprintf(path, sizeof path, "/proc/%d/ns/pid", pid);
  int inside = link_text(path, buf, sizeof buf) == 0 && strcmp(buf, container_ns) == 0;
  if (depth > 0 && !inside) return -1; /* a parent outside the container (docker exec's shim): no record */
  int cpid = -1;
  snprintf(path, sizeof path, "/proc/%d/status", pid);
  if (inside && read_text(path, buf, sizeof buf) >= 0) {
    char *line = strstr(buf, "\nNSpid:");
    char *end = line ? strchr(line + 1, '\n') : NULL;
    if (end) {
      *end = 0;
      char *last = strrchr(line, '\t');
      if (last) cpid = atoi(last + 1);
    }
  }
  char *exe = NULL;
  snprintf(path, sizeof path, "/proc/%d/exe", pid);
  if (exec_path) exe = strdup(exec_path);
  else if (link_text(path, buf, sizeof buf) == 0) exe = strdup(buf);
  if (read_stat(pid, &ppid2, &start2) < 0 || start2 != start) {
    free(exe);
    return depth > 0 ? -1 : add_proc(pid, 'g');
  }
  sample(); /* the counter now is past this process's own birth */
  int id = add_proc(pid, origin_new);
  procs[id].cpid = cpid;
  procs[id].ppid = ppid2;
  procs[id].start = start;
  procs[id].exe = exe;
  if (inside && ppid2 > 0 && depth < 64) {
    /* The parent is alive (it is our parent): resolve it now, while /proc can tell. */
    int parent = process_of(ppid2, depth + 1, NULL, 0);
    if (parent >= 0 && procs[parent].cpid >= 0) procs[id].parent = parent;
    /* The container's init adopts orphans: whoever started this process has already exited. */
    procs[id].orphaned = procs[id].origin == 'n' && ppid2 == init_pid;
  }
  return id;
}

/*
 * The record an event of `pid` belongs to (depth > 0: `pid` is a parent being resolved, -1 when
 * it is not a container process or is gone). `blocked`: the process is waiting for our answer to
 * its exec, so it holds its pid now and the event is certainly its own.
 */
static int process_of(int pid, int depth, const char *exec_path, int blocked) {
  if (pid <= 0 || pid >= pid_max) {
    if (depth > 0) return -1;
    if (!by_pid[0]) add_proc(0, 'g'); /* one record for every event without a usable pid */
    return by_pid[0] - 1;
  }
  int id = by_pid[pid] - 1;
  if (id < 0) return learn(pid, depth, exec_path);
  proc_t *p = &procs[id];
  if (p->origin != 'g' && !maybe_reused(p)) return id;
  int ppid;
  unsigned long long start;
  int alive = read_stat(pid, &ppid, &start) == 0;
  if (alive && p->origin != 'g' && start == p->start) {
    mark_seen(p);
    return id;
  }
  if (blocked || depth > 0) return learn(pid, depth, exec_path); /* it holds the pid now */
  if (p->origin == 'g' && !alive) return id; /* still nobody to read: the same unknown process */
  if (p->origin == 'g' && !maybe_reused(p)) return learn(pid, depth, exec_path); /* gone was gone: this is another */
  /* The pid may have changed hands since: this event is the old process's or the new one's. */
  ambiguous++;
  return add_proc(pid, 'g');
}

/* Re-reads the records whose pid the counter just passed, so a live one stays trusted. */
static void sample(void) {
  int from = sample_counter();
  int count = (last_pid - from + pid_max) % pid_max;
  for (int i = 1; i <= count; i++) {
    int pid = (from + i) % pid_max, id = by_pid[pid] - 1;
    if (id < 0 || procs[id].origin == 'g') continue;
    int ppid;
    unsigned long long start;
    if (read_stat(pid, &ppid, &start) == 0 && start == procs[id].start) mark_seen(&procs[id]);
  }
}

/* ---- accesses, de-duplicated (process, kind, path), in the order first seen ---- */

typedef struct {
  uint64_t hash;
  int proc;
  char kind;
  char *path;
} access_t;

static access_t *accesses;
static size_t naccesses, capaccesses;
static int32_t *slots; /* open addressing: index + 1 into accesses */
static size_t nslots;

static uint64_t hash_access(int proc, char kind, const char *path) {
  uint64_t h = 1469598103934665603ULL ^ (uint64_t)(unsigned)proc ^ ((uint64_t)(unsigned char)kind << 32);
  for (const unsigned char *s = (const unsigned char *)path; *s; s++) h = (h ^ *s) * 1099511628211ULL;
  return h;
}

static void rehash(void) {
  nslots = nslots ? nslots * 2 : 4096;
  free(slots);
  slots = calloc(nslots, sizeof *slots);
  if (!slots) die("memory", ENOMEM);
  for (size_t i = 0; i < naccesses; i++) {
    size_t s = accesses[i].hash & (nslots - 1);
    while (slots[s]) s = (s + 1) & (nslots - 1);
    slots[s] = (int32_t)i + 1;
  }
}

static void record(int proc, char kind, const char *path) {
  if ((naccesses + 1) * 2 > nslots) rehash();
  uint64_t h = hash_access(proc, kind, path);
  size_t s = h & (nslots - 1);
  for (; slots[s]; s = (s + 1) & (nslots - 1)) {
    access_t *a = &accesses[slots[s] - 1];
    if (a->hash == h && a->proc == proc && a->kind == kind && strcmp(a->path, path) == 0) return;
  }
  accesses = grow(accesses, &capaccesses, naccesses + 1, sizeof *accesses);
  accesses[naccesses] = (access_t){h, proc, kind, strdup(path)};
  slots[s] = (int32_t)++naccesses;
}

/* ---- mounts: the container's own mounts of its root, to tell a host process's path ---- */

static unsigned container_mounts[64];
static int ncontainer_mounts;

/* The ids of the mounts of device `dev` in the container's mount namespace (its root, usually alone). */
static void read_container_mounts(dev_t dev) {
  char path[64], line[4096];
  snprintf(path, sizeof path, "/proc/%d/mountinfo", init_pid);
  FILE *f = fopen(path, "re");
  if (!f) die(path, errno);
  while (fgets(line, sizeof line, f) && ncontainer_mounts < 64) {
    unsigned id, maj, min;
    if (sscanf(line, "%u %*u %u:%u", &id, &maj, &min) == 3 && maj == major(dev) && min == minor(dev)) container_mounts[ncontainer_mounts++] = id;
  }
  fclose(f);
}

/* Whether the event's file was opened through a mount the container does not have (a host process's). */
static int through_host_mount(int fd) {
  struct statx sx;
  if (statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &sx) < 0 || !(sx.stx_mask & STATX_MNT_ID)) return 0;
  for (int i = 0; i < ncontainer_mounts; i++) if (container_mounts[i] == sx.stx_mnt_id) return 0;
  return 1;
}

/* ---- events ---- */

static int fan;
static pid_t self;

static void handle(const struct fanotify_event_metadata *m) {
  events++;
  if (m->mask & FAN_Q_OVERFLOW) {
    overflows++;
    return;
  }
  char named_buf[4200] = "@", *path = named_buf + 1;
  int named = 0;
  if (m->fd >= 0) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", m->fd);
    named = link_text(link, path, sizeof named_buf - 1) == 0;
    if (named && through_host_mount(m->fd)) path = named_buf; /* "@<host path>" */
  }
  int exec = (m->mask & (FAN_OPEN_EXEC | FAN_OPEN_EXEC_PERM)) != 0;
  int blocked = (m->mask & FAN_OPEN_EXEC_PERM) != 0;
  if (m->pid != self) {
    int id = process_of(m->pid, 0, exec && named ? path : NULL, blocked);
    if (!named) unnamed++;
    else {
      if (exec) record(id, 'x', path);
      else if (m->mask & FAN_OPEN) record(id, 'o', path);
      if (m->mask & (FAN_MODIFY | FAN_CLOSE_WRITE)) record(id, 'w', path);
    }
  }
  if (blocked && m->fd >= 0) {
    /* Always allowed: the audit watches, it never decides. (The kernel itself denies an exec
     * whose file it could not open for us: then there is no fd to answer for.) */
    struct fanotify_response answer = {.fd = m->fd, .response = FAN_ALLOW};
    (void)!write(fan, &answer, sizeof answer);
  }
  if (m->fd >= 0) close(m->fd);
}

/*
 * Reads and handles queued events: one read, or (`all`) until the queue is empty. One read per
 * wake-up saves a read that would find nothing; poll says when there is more.
 */
static void drain(char *buf, size_t size, int all) {
  do {
    ssize_t n = read(fan, buf, size);
    if (n < 0) {
      if (errno == EAGAIN) return;
      if (errno != EINTR) unnamed++; /* an event whose file the kernel could not open for us (kernels before 6.13) */
      continue;
    }
    sample();
    const struct fanotify_event_metadata *m = (const void *)buf;
    for (; FAN_EVENT_OK(m, n); m = FAN_EVENT_NEXT(m, n)) handle(m);
  } while (all);
}

/* ---- output ---- */

static void put_path(const char *s) {
  if (!s) {
    fputc('-', stdout);
    return;
  }
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c <= 0x20 || *c == 0x7f || *c == '%') printf("%%%02X", *c);
    else fputc(*c, stdout);
  }
}

static void put_int(int v) {
  if (v < 0) fputs(" -", stdout);
  else printf(" %d", v);
}

static void report(void) {
  for (size_t i = 0; i < nprocs; i++) {
    const proc_t *p = &procs[i];
    printf("P %zu %d", i, p->pid);
    put_int(p->cpid);
    printf(" %c", p->origin);
    put_int(p->ppid);
    put_int(p->parent);
    printf(" %d ", p->orphaned);
    put_path(p->exe);
    fputc('\n', stdout);
  }
  for (size_t i = 0; i < naccesses; i++) {
    printf("A %c %d ", accesses[i].kind, accesses[i].proc);
    put_path(accesses[i].path);
    fputc('\n', stdout);
  }
  printf("C %llu %llu %llu %llu\nEND\n", events, unnamed, ambiguous, overflows);
  if (fflush(stdout) != 0) exit(2);
}

static int init_group(void) {
  unsigned flags = FAN_CLOEXEC | FAN_NONBLOCK | FAN_CLASS_CONTENT | FAN_UNLIMITED_QUEUE;
  unsigned event_flags = O_RDONLY | O_LARGEFILE | O_CLOEXEC | O_NONBLOCK; /* O_NONBLOCK: a FIFO's open must not wait */
  int fd = fanotify_init(flags | FAN_REPORT_FD_ERROR, event_flags);
  if (fd < 0 && errno == EINVAL) fd = fanotify_init(flags, event_flags); /* before 6.13 */
  if (fd >= 0) return fd;
  if (errno == EPERM) fprintf(stderr, "fanotify needs root (CAP_SYS_ADMIN) on the Docker host\n");
  else if (errno == EINVAL) fprintf(stderr, "this kernel has no fanotify permission events (CONFIG_FANOTIFY_ACCESS_PERMISSIONS)\n");
  else if (errno == ENOSYS) fprintf(stderr, "this kernel has no fanotify (CONFIG_FANOTIFY)\n");
  else fprintf(stderr, "fanotify_init: %s\n", strerror(errno));
  exit(2);
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--probe") == 0) {
    close(init_group());
    return 0;
  }
  if (argc != 2 || atoi(argv[1]) <= 0) {
    fprintf(stderr, "usage: %s --probe | <init-pid>\n", argv[0]);
    return 2;
  }
  init_pid = atoi(argv[1]);
  self = getpid();
  char buf[256];
  if (read_text("/proc/sys/kernel/pid_max", buf, sizeof buf) < 0) die("/proc/sys/kernel/pid_max", errno);
  pid_max = atoi(buf);
  by_pid = calloc((size_t)pid_max, sizeof *by_pid);
  lastpid_fd = open("/proc/sys/kernel/ns_last_pid", O_RDONLY | O_CLOEXEC);
  if (!by_pid || pid_max <= 0 || lastpid_fd < 0) die("/proc/sys/kernel/ns_last_pid", errno ? errno : EINVAL);
  /* As many fds as one read can make: the kernel opens one per event. */
  struct rlimit nofile;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  getrlimit(RLIMIT_NOFILE, &nofile);
  size_t room = nofile.rlim_cur > 64 ? (size_t)(nofile.rlim_cur - 32) * FAN_EVENT_METADATA_LEN : 4096;
  size_t size = room < 65536 ? room : 65536;
  char *events_buf = malloc(size);

  char root[64];
  snprintf(root, sizeof root, "/proc/%d/root", init_pid);
  snprintf(buf, sizeof buf, "/proc/%d/ns/pid", init_pid);
  struct statfs fs;
  struct stat st;
  if (link_text(buf, container_ns, sizeof container_ns) < 0 || statfs(root, &fs) < 0 || stat(root, &st) < 0) die(root, errno);
  if (fs.f_type != OVERLAYFS_SUPER_MAGIC) {
    fprintf(stderr, "%s is not an overlay filesystem: the container's root cannot be audited (storage driver not overlay2, or the container stopped)\n", root);
    return 2;
  }
  read_container_mounts(st.st_dev);
  if (ncontainer_mounts == 0) {
    fprintf(stderr, "%s: the container's mount table has no mount of its root filesystem\n", root);
    return 2;
  }
  fan = init_group();
  if (fanotify_mark(fan, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, MASK, AT_FDCWD, root) < 0) die("fanotify_mark", errno);

  /* The processes alive now: "before"; everything learnt later is "n" (or "g"). */
  sample_counter();
  swept = 0;
  DIR *proc = opendir("/proc");
  if (!proc) die("/proc", errno);
  for (struct dirent *e; (e = readdir(proc));) {
    int pid = atoi(e->d_name);
    if (pid <= 0 || pid >= pid_max || by_pid[pid]) continue;
    char path[64], ns[64];
    snprintf(path, sizeof path, "/proc/%d/ns/pid", pid);
    if (link_text(path, ns, sizeof ns) == 0 && strcmp(ns, container_ns) == 0) {
      int id = learn(pid, 0, NULL);
      if (procs[id].origin == 'g') by_pid[pid] = 0, nprocs--; /* exited meanwhile: not there at the start */
    }
  }
  closedir(proc);
  origin_new = 'n';
  printf("ready %llu %zu\n", (unsigned long long)st.st_dev, nprocs);
  fflush(stdout);

  struct pollfd fds[2] = {{.fd = fan, .events = POLLIN}, {.fd = 0, .events = POLLIN}};
  for (;;) {
    int n = poll(fds, 2, 100);
    if (n < 0 && errno != EINTR) die("poll", errno);
    if (n == 0) sample();
    if (fds[0].revents) drain(events_buf, size, 0);
    if (fds[1].revents) {
      ssize_t got = read(0, buf, sizeof buf);
      if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) break;
    }
  }
  /* No new events from here (a busy container could keep the queue full forever), then the rest. */
  if (fanotify_mark(fan, FAN_MARK_FLUSH | FAN_MARK_FILESYSTEM, 0, AT_FDCWD, NULL) < 0) die("fanotify_mark (flush)", errno);
  drain(events_buf, size, 1);
  close(fan); /* any permission event still queued is allowed by the kernel now */
  report();
  return 0;
}
