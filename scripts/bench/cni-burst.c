// cni-burst: starts N copies of a CNI plugin at once, as a runtime starting N pods does, each
// with the same configuration on stdin and its own CNI_* variables, and prints for each one its
// time from the start to its exit and its peak resident set, as the kernel accounts them (wait4).
// The copies are forked first and held; then all are let go together (each execs the plugin) and
// this process does nothing but reap them, so a copy's time is its own, not the forks' after it.
//
//   cni-burst N CONFIG_FILE CPUS|- [-e KEY=VALUE]... -- PLUGIN
//
// "%d" in a VALUE becomes the copy's index (a container id, a pod's netns). CPUS pins every
// copy (sched_setaffinity), "-" leaves them free. Prints "WALL_MS MAXRSS_KB STATUS" per copy.
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_COPIES 256
#define MAX_ENV 16

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: cni-burst N CONFIG_FILE CPUS|- [-e KEY=VALUE]... -- PLUGIN\n");
    return 2;
  }
  int copies = atoi(argv[1]);
  if (copies < 1 || copies > MAX_COPIES) return 2;
  FILE *file = fopen(argv[2], "rb");
  if (!file) return perror("config"), 1;
  static char config[1 << 20];
  size_t length = fread(config, 1, sizeof config, file);
  fclose(file);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  int pin = strcmp(argv[3], "-") != 0;
  for (char *p = argv[3]; pin && *p; ++p)
    if (*p >= '0' && *p <= '9') CPU_SET(*p - '0', &cpus);
  const char *envs[MAX_ENV];
  int env_count = 0;
  int arg = 4;
  for (; arg < argc && strcmp(argv[arg], "--") != 0; ++arg) {
    if (strcmp(argv[arg], "-e") == 0 && arg + 1 < argc && env_count < MAX_ENV) envs[env_count++] = argv[++arg];
  }
  if (arg + 1 >= argc) return 2;
  char **plugin = argv + arg + 1;
  pid_t pids[MAX_COPIES];
  int go[2];
  if (pipe(go) != 0) return perror("pipe"), 1;
  for (int i = 0; i < copies; ++i) {
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) return perror("pipe"), 1;
    pid_t pid = fork();
    if (pid < 0) return perror("fork"), 1;
    if (pid == 0) {
      char nothing;
      close(go[1]);
      while (read(go[0], &nothing, 1) > 0) {
      }  // held until the start: the end of the pipe
      close(go[0]);
      for (int e = 0; e < env_count; ++e) {
        char value[512];
        const char *equals = strchr(envs[e], '=');
        if (!equals) _exit(126);
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(equals - envs[e]), envs[e]);
        // The copy's index where the value says %d.
        snprintf(value, sizeof value, equals + 1, i);
        setenv(key, value, 1);
      }
      if (pin) sched_setaffinity(0, sizeof cpus, &cpus);
      dup2(pipefd[0], 0);
      int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      dup2(null, 2);
      execv(plugin[0], plugin);
      _exit(127);
    }
    close(pipefd[0]);
    pids[i] = pid;
    // At once, as a runtime does: the pipe holds it (a configuration is far below 64 KiB).
    if (write(pipefd[1], config, length) != (ssize_t)length) perror("write");
    close(pipefd[1]);
  }
  close(go[0]);
  const double started = now_ms();
  close(go[1]);  // all go
  for (int reaped = 0; reaped < copies; ++reaped) {
    int status;
    struct rusage usage;
    pid_t pid = wait4(-1, &status, 0, &usage);
    if (pid < 0) return perror("wait4"), 1;
    double ended = now_ms();
    for (int i = 0; i < copies; ++i) {
      if (pids[i] != pid) continue;
      printf("%.3f %ld %d\n", ended - started, usage.ru_maxrss,
             WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
  }
  return 0;
}
