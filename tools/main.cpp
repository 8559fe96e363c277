// phasekv: the PhaseKV command-line tool (convert, inspect, run, bench, selftest, perplexity,
// tokenize). The commands live in cmd_*.cpp; this file sets up the process around them.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>

#include "commands.h"
#include "file_io.h"

namespace {

// A temporary output (a model or report being written) must not outlive a killed command.
void on_fatal_signal(int sig) {
  phasekv::remove_pending_temporaries();
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace phasekv::tools;
  // Closed standard descriptors: a file opened later would take their number, and printing
  // would write into it (a model being converted, say). Fill them with /dev/null first.
  bool stdout_closed = false;
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int nfd = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (nfd >= 0 && nfd != fd) {
      dup2(nfd, fd);
      close(nfd);
    }
    if (fd == 1) stdout_closed = true;
  }
  if (stdout_closed) {
    std::fprintf(stderr, "phasekv: error: standard output is closed (redirect it to /dev/null to discard it)\n");
    return kExitBadInput;
  }
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
  CLI::App app{kAppDescription};
  int exit_code = kExitOk;
  register_commands(app, &exit_code);
  // CLI11 only says "A subcommand is required" for a mistyped command: name it.
  if (argc > 1 && argv[1][0] != '-' &&
      app.get_subcommands([&](const CLI::App* c) { return c->check_name(argv[1]); }).empty()) {
    std::fprintf(stderr, "phasekv: unknown command '%s' (convert, inspect, run, bench, selftest; see --help)\n",
                 argv[1]);
    return kExitBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);  // prints help / the usage error
    rc = rc == 0 ? kExitOk : kExitBadInput;
    const phasekv::Status fs = flush_stdout();
    if (!fs.ok()) return report(argv[1] && argv[1][0] != '-' ? argv[1] : "--help", fs);
    return rc;
  }
  // Output that could not be written (a full disk, /dev/full) is an error, not a success.
  const phasekv::Status fs = flush_stdout();
  if (!fs.ok() && exit_code == kExitOk) return report(argc > 1 ? argv[1] : "phasekv", fs);
  return exit_code;
}
