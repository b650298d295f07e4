// flannel-guard-cni: the CNI plugin a container runtime executes on the node. It holds no CNI
// logic beyond the framing: the call (the CNI_* environment and stdin, bounded) goes over a unix
// socket to the guard on the node, which answers from its live state (lib/cni/server.ts), and its
// answer (stdout, stderr, exit status) is relayed. VERSION is answered here, and so is a call no
// guard answers (README, "CNI"): ADD passes prevResult through with a note on stderr (error 11
// with failOnError), CHECK error 11, STATUS error 50 naming the socket, DEL and GC succeed.
//
// Freestanding: no C library, the system calls made directly (x86-64, arm64), one static file
// of a few kilobytes that runs on any node whatever its libc. Everything is bounded: stdin (size
// and time), the environment, the answer (size), and the whole exchange (the configuration's
// budgetMs and a margin), so a guard that accepts and never answers cannot hold a pod.
#include "shim_json.h"

// --- system calls ------------------------------------------------------------------------------

#if defined(__x86_64__)
enum {
  SYS_READ = 0,
  SYS_CLOSE = 3,
  SYS_SOCKET = 41,
  SYS_CONNECT = 42,
  SYS_SENDTO = 44,
  SYS_GETSOCKOPT = 55,
  SYS_CLOCK_GETTIME = 228,
  SYS_EXIT_GROUP = 231,
  SYS_PPOLL = 271,
  SYS_WRITE = 1
};
static long sys6(long n, long a, long b, long c, long d, long e, long f) {
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  register long r9 __asm__("r9") = f;
  long ret;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
}
__asm__(
    ".text\n.global _start\n_start:\n xor %rbp,%rbp\n mov %rsp,%rdi\n and $-16,%rsp\n"
    " call shim_start\n hlt\n");
#elif defined(__aarch64__)
enum {
  SYS_READ = 63,
  SYS_CLOSE = 57,
  SYS_SOCKET = 198,
  SYS_CONNECT = 203,
  SYS_SENDTO = 206,
  SYS_GETSOCKOPT = 209,
  SYS_CLOCK_GETTIME = 113,
  SYS_EXIT_GROUP = 94,
  SYS_PPOLL = 73,
  SYS_WRITE = 64
};
static long sys6(long n, long a, long b, long c, long d, long e, long f) {
  register long x8 __asm__("x8") = n;
  register long x0 __asm__("x0") = a;
  register long x1 __asm__("x1") = b;
  register long x2 __asm__("x2") = c;
  register long x3 __asm__("x3") = d;
  register long x4 __asm__("x4") = e;
  register long x5 __asm__("x5") = f;
  __asm__ volatile("svc 0"
                   : "+r"(x0)
                   : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                   : "memory");
  return x0;
}
__asm__(
    ".text\n.global _start\n_start:\n mov x29, #0\n mov x30, #0\n mov x0, sp\n"
    " bl shim_start\n");
#else
#error "flannel-guard-cni: x86-64 and arm64 only"
#endif

#define sys3(n, a, b, c) sys6((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)

// The kernel's ABI (the same on both architectures).
enum { AF_UNIX = 1, SOCK_STREAM = 1, SOCK_NONBLOCK = 04000, SOCK_CLOEXEC = 02000000 };
enum { SOL_SOCKET = 1, SO_PEERCRED = 17, MSG_NOSIGNAL = 0x4000, CLOCK_MONOTONIC = 1 };
enum { POLLIN = 1, POLLOUT = 4, POLLERR = 8, POLLHUP = 0x10 };
enum { EINTR = 4, EAGAIN = 11 };
struct timespec_k {
  long sec, nsec;
};
struct pollfd_k {
  int fd;
  short events, revents;
};
struct ucred_k {
  int pid;
  unsigned uid, gid;
};
struct sockaddr_un_k {
  unsigned short family;
  char path[108];
};
_Static_assert(sizeof(struct ucred_k) == 12, "struct ucred");
_Static_assert(sizeof(struct sockaddr_un_k) == 110, "struct sockaddr_un");
_Static_assert(sizeof(struct pollfd_k) == 8, "struct pollfd");

// clang may call these for copies and zeroing even in freestanding code.
void* memcpy(void* to, const void* from, unsigned long n) {
  char* d = to;
  const char* s = from;
  while (n--) *d++ = *s++;
  return to;
}
void* memset(void* to, int c, unsigned long n) {
  char* d = to;
  while (n--) *d++ = (char)c;
  return to;
}

static __attribute__((noreturn)) void exit_now(int status) {
  for (;;) sys3(SYS_EXIT_GROUP, status, 0, 0);
}

static long now_ms(void) {
  struct timespec_k t;
  sys3(SYS_CLOCK_GETTIME, CLOCK_MONOTONIC, &t, 0);
  return t.sec * 1000 + t.nsec / 1000000;
}

// Waits for `events` on fd until `deadline` (monotonic ms): 1 ready, 0 out of time, -errno.
static long wait_for(int fd, short events, long deadline) {
  for (;;) {
    long left = deadline - now_ms();
    if (left <= 0) return 0;
    struct timespec_k timeout = {left / 1000, (left % 1000) * 1000000};
    struct pollfd_k poll = {fd, events, 0};
    long ready = sys6(SYS_PPOLL, (long)&poll, 1, (long)&timeout, 0, 8, 0);
    if (ready == -EINTR) continue;
    if (ready != 0) return ready;
  }
}

static void write_all(int fd, const char* bytes, unsigned long length) {
  while (length > 0) {
    long written = sys3(SYS_WRITE, fd, bytes, length);
    if (written == -EINTR) continue;
    if (written <= 0) return;  // the runtime stopped reading: nothing more can be said there
    bytes += written;
    length -= (unsigned long)written;
  }
}

// --- bounds (lib/cni/request.ts has the same) ---------------------------------------------------

#define MAX_STDIN_BYTES (8u << 20)
#define MAX_ENV_BYTES (64u << 10)
#define MAX_STDERR_BYTES (64u << 10)
#define MAX_STDOUT_BYTES (MAX_STDIN_BYTES + (64u << 10))
#define STDIN_TIMEOUT_MS 10000
#define DEFAULT_BUDGET_MS 1000
#define MAX_BUDGET_MS 600000
// The guard answers within the budget; past it and this margin, no guard is answering.
#define ANSWER_MARGIN_MS 750
#define DEFAULT_SOCKET "/run/flannel-guard/cni.sock"

static char stdin_bytes[MAX_STDIN_BYTES + 1];
static char request[12 + MAX_ENV_BYTES];  // the header and the environment; stdin follows
static char answer[16 + MAX_STDOUT_BYTES + MAX_STDERR_BYTES];

// --- text ----------------------------------------------------------------------------------

// A line being built: bounded, silently cut at its capacity (messages are ours, and short).
struct text {
  char bytes[4096];
  unsigned long length;
};

// The line as a C string: ended with a NUL, cut at its capacity.
static const char* terminated(struct text* t) {
  t->bytes[t->length < sizeof t->bytes ? t->length : sizeof t->bytes - 1] = 0;
  return t->bytes;
}

static void put(struct text* t, const char* s) {
  while (*s && t->length < sizeof t->bytes) t->bytes[t->length++] = *s++;
}

static void put_span(struct text* t, const char* s, unsigned long n) {
  while (n-- && t->length < sizeof t->bytes) t->bytes[t->length++] = *s++;
}

static void put_number(struct text* t, unsigned long n) {
  char digits[24];
  int count = 0;
  do digits[count++] = (char)('0' + n % 10);
  while ((n /= 10) != 0);
  while (count > 0 && t->length < sizeof t->bytes) t->bytes[t->length++] = digits[--count];
}

// A JSON string's content: quotes, backslashes and control characters escaped.
static void put_escaped(struct text* t, const char* s) {
  static const char hex[] = "0123456789abcdef";
  for (; *s; ++s) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      put_span(t, "\\", 1);
      put_span(t, (const char*)&c, 1);
    } else if (c < 0x20) {
      char escape[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
      put_span(t, escape, 6);
    } else {
      put_span(t, (const char*)&c, 1);
    }
  }
}

static unsigned long length_of(const char* s) {
  unsigned long n = 0;
  while (s[n]) ++n;
  return n;
}

static int starts_with(const char* s, const char* prefix) {
  while (*prefix)
    if (*s++ != *prefix++) return 0;
  return 1;
}

static int equals(const char* a, const char* b) {
  return starts_with(a, b) && a[length_of(b)] == 0;
}

// --- answering here
// -------------------------------------------------------------------------------

struct call {
  const char* command;  // CNI_COMMAND (null: missing)
  struct shim_config config;
  int parsed;  // stdin is one JSON object
  const char* socket;
  char socket_path[108];
  char version[32];  // the error objects' cniVersion: the configuration's, else 1.1.0
};

static __attribute__((noreturn)) void fail(const struct call* call, int code, const char* msg,
                                           const char* details) {
  struct text t = {{0}, 0};
  put(&t, "{\"cniVersion\":\"");
  put(&t, call->version);
  put(&t, "\",\"code\":");
  put_number(&t, (unsigned long)code);
  put(&t, ",\"msg\":\"");
  put_escaped(&t, msg);
  put(&t, "\"");
  if (details) {
    put(&t, ",\"details\":\"");
    put_escaped(&t, details);
    put(&t, "\"");
  }
  put(&t, "}\n");
  write_all(1, t.bytes, t.length);
  exit_now(1);
}

static void note(const char* line) {
  struct text t = {{0}, 0};
  put(&t, "flannel-guard-cni: ");
  put(&t, line);
  put(&t, "\n");
  write_all(2, t.bytes, t.length);
}

// DEL releases nothing of ours: whatever goes wrong, it must not fail the runtime's DEL.
static __attribute__((noreturn)) void release_anyway(const char* why) {
  struct text t = {{0}, 0};
  put(&t, "DEL: nothing to release (");
  put(&t, why);
  put(&t, ")");
  note(terminated(&t));
  exit_now(0);
}

// What is answered when no guard answers: `why` says what happened on the socket.
static __attribute__((noreturn)) void no_guard(const struct call* call, const char* why) {
  struct text msg = {{0}, 0};
  put(&msg, "no flannel-guard answered on ");
  put(&msg, call->socket);
  const char* message = terminated(&msg);
  const char* command = call->command;
  if (equals(command, "DEL") || equals(command, "GC")) {
    struct text t = {{0}, 0};
    put(&t, command);
    put(&t, ": ");
    put(&t, message);
    put(&t, " (");
    put(&t, why);
    put(&t, "): nothing to do");
    note(terminated(&t));
    exit_now(0);
  }
  if (!call->parsed) {
    fail(call, 6, "failed to decode the network configuration", "stdin is not one JSON object");
  }
  if (equals(command, "STATUS")) fail(call, 50, message, why);
  if (equals(command, "ADD") && !call->config.fail_on_error) {
    if (call->config.prev_result == 0) {
      fail(call, 7, "flannel-guard-cni must be called as a chained plugin",
           "ADD needs a prevResult (put it after the plugin that creates the interface)");
    }
    struct text t = {{0}, 0};
    put(&t, message);
    put(&t, " (");
    put(&t, why);
    put(&t, "): the VTEP was not checked (pod creation goes on)");
    note(terminated(&t));
    write_all(1, call->config.prev_result, call->config.prev_result_length);
    write_all(1, "\n", 1);
    exit_now(0);
  }
  fail(call, 11, message, why);  // CHECK, and ADD with failOnError: try again later
}

static void describe_errno(struct text* t, const char* syscall, long error) {
  static const struct {
    int number;
    const char* name;
  } names[] = {
      {2, "ENOENT"},       {13, "EACCES"},        {11, "EAGAIN"}, {20, "ENOTDIR"},
      {104, "ECONNRESET"}, {111, "ECONNREFUSED"}, {32, "EPIPE"},  {91, "EPROTOTYPE"},
      {110, "ETIMEDOUT"},  {1, "EPERM"},
  };
  put(t, syscall);
  put(t, ": ");
  for (unsigned i = 0; i < sizeof names / sizeof names[0]; ++i) {
    if (names[i].number == -error) {
      put(t, names[i].name);
      return;
    }
  }
  put(t, "errno ");
  put_number(t, (unsigned long)-error);
}

static void put_le32(char* to, unsigned long value) {
  for (int i = 0; i < 4; ++i) to[i] = (char)((value >> (8 * i)) & 0xff);
}

static unsigned long get_le32(const char* from) {
  unsigned long value = 0;
  for (int i = 3; i >= 0; --i) value = (value << 8) | (unsigned char)from[i];
  return value;
}

// --- the exchange with the guard -------------------------------------------------------------

static int send_all(int fd, const char* bytes, unsigned long length, long deadline,
                    struct text* why) {
  while (length > 0) {
    long n = sys6(SYS_SENDTO, fd, (long)bytes, (long)length, MSG_NOSIGNAL, 0, 0);
    if (n == -EINTR) continue;
    if (n == -EAGAIN) {
      if (wait_for(fd, POLLOUT, deadline) <= 0) {
        put(why, "the guard did not take the request in time");
        return 0;
      }
      continue;
    }
    if (n <= 0) {
      describe_errno(why, "send", n);
      return 0;
    }
    bytes += n;
    length -= (unsigned long)n;
  }
  return 1;
}

// Sends the request (the header and environment, then stdin) and relays the answer; returns
// only when no guard answered, with why.
static void ask_guard(const struct call* call, unsigned long request_length,
                      unsigned long stdin_length, long deadline, struct text* why) {
  int fd = (int)sys3(SYS_SOCKET, AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    describe_errno(why, "socket", fd);
    return;
  }
  struct sockaddr_un_k address;
  memset(&address, 0, sizeof address);
  address.family = AF_UNIX;
  memcpy(address.path, call->socket, length_of(call->socket));
  for (;;) {
    long connected = sys3(SYS_CONNECT, fd, &address, sizeof address);
    if (connected == 0) break;
    if (connected == -EINTR) continue;
    if (connected != -EAGAIN || now_ms() >= deadline) {  // EAGAIN: the guard's queue is full
      describe_errno(why, "connect", connected);
      return;
    }
    struct timespec_k pause = {0, 2000000};
    sys6(SYS_PPOLL, 0, 0, (long)&pause, 0, 8, 0);
  }
  // Only root may answer for the node: anyone else's socket at this path is not the guard.
  struct ucred_k peer;
  unsigned length = sizeof peer;
  long got = sys6(SYS_GETSOCKOPT, fd, SOL_SOCKET, SO_PEERCRED, (long)&peer, (long)&length, 0);
  if (got != 0) {
    describe_errno(why, "getsockopt(SO_PEERCRED)", got);
    return;
  }
  if (peer.uid != 0) {
    put(why, "the socket is served by uid ");
    put_number(why, peer.uid);
    put(why, ", not root");
    return;
  }
  if (!send_all(fd, request, request_length, deadline, why) ||
      !send_all(fd, stdin_bytes, stdin_length, deadline, why)) {
    return;
  }
  unsigned long have = 0;
  unsigned long want = 16;  // the header, then the header's lengths
  for (;;) {
    if (have == want && want == 16) {
      if (!starts_with(answer, "FGR1")) {
        put(why, "the guard's answer is not an answer (bad header)");
        return;
      }
      unsigned long status = get_le32(answer + 4);
      unsigned long out = get_le32(answer + 8);
      unsigned long err = get_le32(answer + 12);
      if (status > 255 || out > MAX_STDOUT_BYTES || err > MAX_STDERR_BYTES) {
        put(why, "the guard's answer is out of bounds");
        return;
      }
      want = 16 + out + err;
    }
    if (have == want) break;
    long ready = wait_for(fd, POLLIN, deadline);
    if (ready <= 0) {
      put(why, "the guard did not answer in time");
      return;
    }
    long n = sys3(SYS_READ, fd, answer + have, want - have);
    if (n == -EINTR || n == -EAGAIN) continue;
    if (n < 0) {
      describe_errno(why, "read", n);
      return;
    }
    if (n == 0) {
      put(why, "the guard closed the connection mid-answer");
      return;
    }
    have += (unsigned long)n;
  }
  // Whole and well-formed: nothing more may follow it.
  char extra;
  if (sys3(SYS_READ, fd, &extra, 1) > 0) {
    put(why, "the guard's answer runs past its length");
    return;
  }
  unsigned long out = get_le32(answer + 8);
  unsigned long err = get_le32(answer + 12);
  write_all(2, answer + 16 + out, err);
  write_all(1, answer + 16, out);
  exit_now((int)get_le32(answer + 4));
}

// --- main ----------------------------------------------------------------------------------------

static unsigned long read_stdin(const struct call* call) {
  unsigned long have = 0;
  long deadline = now_ms() + STDIN_TIMEOUT_MS;
  for (;;) {
    long ready = wait_for(0, POLLIN, deadline);
    if (ready == 0) {
      if (call->command && equals(call->command, "DEL"))
        release_anyway("stdin did not end in time");
      fail(call, 11, "flannel-guard-cni: stdin did not end within 10000 ms", 0);
    }
    long n = sys3(SYS_READ, 0, stdin_bytes + have, sizeof stdin_bytes - have);
    if (n == -EINTR || n == -EAGAIN) continue;
    if (n <= 0) return have;  // end (or an error: what was read is all there is)
    have += (unsigned long)n;
    if (have > MAX_STDIN_BYTES) {
      if (call->command && equals(call->command, "DEL")) release_anyway("stdin too large");
      fail(call, 6, "failed to decode the network configuration",
           "stdin is larger than 8388608 bytes");
    }
  }
}

__attribute__((used, noreturn)) void shim_start(long* stack) {
  long argc = stack[0];
  char** env = (char**)(stack + 1 + argc + 1);
  static struct call call;
  memcpy(call.version, "1.1.0", 6);
  call.socket = DEFAULT_SOCKET;
  // The CNI_* variables, framed as NUL-terminated KEY=VALUE; nothing else leaves the node's shim.
  unsigned long env_length = 0;
  for (char** e = env; *e; ++e) {
    if (!starts_with(*e, "CNI_")) continue;
    if (starts_with(*e, "CNI_COMMAND=")) call.command = *e + 12;
    unsigned long n = length_of(*e) + 1;
    if (env_length + n > MAX_ENV_BYTES) fail(&call, 4, "the CNI_* environment is too large", 0);
    memcpy(request + 12 + env_length, *e, n);
    env_length += n;
  }
  unsigned long stdin_length = read_stdin(&call);
  int parsed = call.parsed = shim_parse_config(stdin_bytes, stdin_length, &call.config);
  if (parsed && call.config.version_length > 0 &&
      call.config.version_length < sizeof call.version &&
      shim_is_version(call.config.version, call.config.version_length)) {
    memcpy(call.version, call.config.version, call.config.version_length);
    call.version[call.config.version_length] = 0;
  }
  if (call.command == 0 || call.command[0] == 0) {
    fail(&call, 4, "required env variable CNI_COMMAND missing", 0);
  }
  if (equals(call.command, "VERSION")) {
    // The version asked (any JSON string, as given), else the newest.
    if (!parsed && !shim_is_blank(stdin_bytes, stdin_length)) {
      fail(&call, 6, "failed to decode the network configuration", "stdin is not JSON");
    }
    struct text t = {{0}, 0};
    put(&t, "{\"cniVersion\":");
    if (parsed && call.config.version_token) {
      put_span(&t, call.config.version_token, call.config.version_token_length);
    } else {
      put(&t, "\"1.1.0\"");
    }
    put(&t, ",\"supportedVersions\":[\"1.0.0\",\"1.1.0\"]}\n");
    write_all(1, t.bytes, t.length);
    exit_now(0);
  }
  if (parsed && (call.config.socket_invalid || call.config.socket_length > 0)) {
    if (call.config.socket_invalid ||
        !shim_is_socket_path(call.config.socket, call.config.socket_length)) {
      if (equals(call.command, "DEL")) release_anyway("invalid socket");
      fail(&call, 7, "invalid socket", "an absolute path of at most 107 printable characters");
    }
    memcpy(call.socket_path, call.config.socket, call.config.socket_length);
    call.socket_path[call.config.socket_length] = 0;
    call.socket = call.socket_path;
  }
  long budget = parsed ? call.config.budget_ms : -1;
  if (budget <= 0 || budget > MAX_BUDGET_MS) budget = DEFAULT_BUDGET_MS;
  long deadline = now_ms() + budget + ANSWER_MARGIN_MS;
  memcpy(request, "FGC1", 4);
  put_le32(request + 4, env_length);
  put_le32(request + 8, stdin_length);
  struct text why = {{0}, 0};
  ask_guard(&call, 12 + env_length, stdin_length, deadline, &why);
  no_guard(&call, terminated(&why));
}
