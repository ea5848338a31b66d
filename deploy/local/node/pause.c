/* The pod sandbox ("pause") process of the local fleet's real nodes: holds the pod's namespaces,
 * reaps orphans, exits on SIGINT/SIGTERM. deploy/local/build-images compiles it statically
 * (gcc -static -Os) into the image fleethub-pause, the nodes' CRI sandbox_image. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction term = {0}, child = {0};
  term.sa_handler = stop;
  sigaction(SIGINT, &term, NULL);
  sigaction(SIGTERM, &term, NULL);
  child.sa_handler = reap;
  child.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &child, NULL);
  for (;;) pause();
  return 0;
}
