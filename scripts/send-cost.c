// send-cost: what sending an answer from a mapped store costs the sender,
// with write(2) from the mapping against sendfile(2) from the file, over a
// loopback TCP pair whose reader runs on another thread. Also times a plain
// user-space copy of the same bytes. Answers start at pseudo-random offsets
// of the file's first SPAN bytes (put them in the page cache first).
//
//   cc -O2 -pthread -o /tmp/send-cost scripts/send-cost.c
//   /tmp/send-cost DATA_DIR/00000000000000000000.seg SPAN ANSWER_BYTES COUNT
//
// Prints, per mode, the sending thread's CPU per answer (which includes
// the loopback delivery the kernel runs in the sender's context).
#define _GNU_SOURCE
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

static double thread_cpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *drain(void *arg) {
  int fd = *(int *)arg;
  char *buf = malloc(1 << 20);
  while (read(fd, buf, 1 << 20) > 0) {
  }
  return NULL;
}

static unsigned long next_offset(unsigned long *state, size_t span, size_t len) {
  *state ^= *state << 13;
  *state ^= *state >> 7;
  *state ^= *state << 17;
  return *state % (span - len);
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s FILE SPAN ANSWER_BYTES COUNT\n", argv[0]);
    return 2;
  }
  int file = open(argv[1], O_RDONLY);
  size_t span = strtoul(argv[2], NULL, 10), len = strtoul(argv[3], NULL, 10);
  int count = atoi(argv[4]);
  if (file < 0 || len == 0 || span <= len || count <= 0) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }
  const char *map = mmap(NULL, span, PROT_READ, MAP_SHARED, file, 0);
  if (map == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  volatile char touch = 0;
  for (size_t i = 0; i < span; i += 4096) touch += map[i];

  int listener = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t addr_len = sizeof addr;
  if (bind(listener, (void *)&addr, sizeof addr) || listen(listener, 1) ||
      getsockname(listener, (void *)&addr, &addr_len)) {
    perror("listen");
    return 1;
  }
  int sender = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(sender, (void *)&addr, sizeof addr)) {
    perror("connect");
    return 1;
  }
  int receiver = accept(listener, NULL, NULL);
  setsockopt(sender, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  pthread_t reader;
  pthread_create(&reader, NULL, drain, &receiver);

  char *copy = malloc(len);
  for (int round = 0; round < 2; round++) {
    for (int mode = 0; mode < 3; mode++) {
      unsigned long state = 88172645463325252UL;
      double started = thread_cpu();
      for (int i = 0; i < count; i++) {
        size_t offset = next_offset(&state, span, len), sent = 0;
        if (mode == 2) {
          memcpy(copy, map + offset, len);
          touch += copy[len / 2];
          continue;
        }
        while (sent < len) {
          ssize_t n;
          if (mode == 0) {
            n = write(sender, map + offset + sent, len - sent);
          } else {
            off_t at = offset + sent;
            n = sendfile(sender, file, &at, len - sent);
          }
          if (n <= 0) {
            perror("send");
            return 1;
          }
          sent += n;
        }
      }
      const char *name[] = {"write from the mapping", "sendfile from the file", "user-space memcpy"};
      printf("%-24s %6.2f us per %zu-byte answer\n", name[mode],
             (thread_cpu() - started) / count * 1e6, len);
    }
  }
  return 0;
}
