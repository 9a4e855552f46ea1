/* The sandbox ("pause") container of the local node: holds the Pod's namespaces, reaps the
 * zombies it inherits, and exits on SIGINT or SIGTERM. Built static, packaged FROM scratch. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { _exit(128 + sig); }

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction action = {0};
  action.sa_handler = stop;
  sigaction(SIGINT, &action, NULL);
  sigaction(SIGTERM, &action, NULL);
  action.sa_handler = reap;
  action.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &action, NULL);
  for (;;) pause();
}
