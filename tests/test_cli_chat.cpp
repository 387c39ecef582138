// `lily chat` end to end (the real executable on the bundled demo model): driven through a pseudo-terminal
// like a person at a terminal — messages, /think off, /reset, /exit — and through a pipe for the non-TTY
// reasoning prefix and --hide-reasoning. Greedy sampling, so the runs are deterministic.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
const std::string kLily = std::string(LILY_BUILD_DIR) + "/lily";
const std::vector<std::string> kChatArgs = {"chat", "--max-tokens", "8", "--temperature", "0", "--seed", "1",
                                            "--ctx", "512", "--backend", "cpu"};

// A child process on the slave side of a pseudo-terminal (stdin, stdout and stderr); we hold the master.
class PtyChild {
 public:
  explicit PtyChild(const std::vector<std::string>& args) {
    master_ = posix_openpt(O_RDWR | O_NOCTTY);
    if (master_ < 0 || grantpt(master_) != 0 || unlockpt(master_) != 0) return;
    const char* name = ptsname(master_);
    if (!name) return;
    const std::string slave = name;
    std::vector<std::string> argv_s = {kLily};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {  // child: only async-signal-safe calls from here
      setsid();
      int s = open(slave.c_str(), O_RDWR);
      if (s < 0) _exit(126);
      ioctl(s, TIOCSCTTY, 0);
      dup2(s, 0);
      dup2(s, 1);
      dup2(s, 2);
      if (s > 2) close(s);
      close(master_);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~PtyChild() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) close(master_);
  }
  bool started() const { return pid_ > 0; }

  void send(const std::string& line) {
    const std::string s = line + "\n";
    ASSERT_EQ(write(master_, s.data(), s.size()), static_cast<ssize_t>(s.size()));
  }

  // Reads until `needle` has appeared `count` times in the transcript, the child closes the terminal, or
  // the timeout passes. Returns whether the needle count was reached.
  bool wait_for(const std::string& needle, int count, double timeout_s = 120) {
    const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (occurrences(needle) < count) {
      if (closed_ || Clock::now() > end) return false;
      read_some(100);
    }
    return true;
  }

  // Reads to the end of output and reaps the child; returns its wait status (-1 on timeout).
  int wait_exit(double timeout_s = 60) {
    const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (!closed_ && Clock::now() < end) read_some(100);
    while (Clock::now() < end) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return status;
      }
      usleep(20000);
    }
    return -1;
  }

  const std::string& transcript() const { return out_; }

 private:
  int occurrences(const std::string& needle) const {
    int n = 0;
    for (size_t p = out_.find(needle); p != std::string::npos; p = out_.find(needle, p + needle.size())) ++n;
    return n;
  }
  void read_some(int timeout_ms) {
    pollfd p{master_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return;
    char buf[4096];
    ssize_t n = read(master_, buf, sizeof buf);
    if (n > 0)
      out_.append(buf, static_cast<size_t>(n));
    else if (n == 0 || errno != EINTR)
      closed_ = true;  // EIO: every slave descriptor is closed (the child exited)
  }

  int master_ = -1;
  pid_t pid_ = -1;
  bool reaped_ = false, closed_ = false;
  std::string out_;
};

struct Stats {
  int prompt = -1, cached = -1, generated = -1;
  std::string finish;
};

// Every "[N prompt tokens (C cached), G generated, X tok/s, REASON]" line, in order.
std::vector<Stats> stats_lines(const std::string& t) {
  static const std::regex re(R"(\[(\d+) prompt tokens \((\d+) cached\), (\d+) generated, [0-9.]+ tok/s, (\w+)\])");
  std::vector<Stats> v;
  for (auto it = std::sregex_iterator(t.begin(), t.end(), re); it != std::sregex_iterator(); ++it)
    v.push_back({std::stoi((*it)[1]), std::stoi((*it)[2]), std::stoi((*it)[3]), (*it)[4]});
  return v;
}

// The reply text printed after the echo of `input` and before the next stats line (whose own dim
// escape is excluded).
std::string reply_after(const std::string& t, const std::string& input, size_t from = 0) {
  size_t a = t.find(input, from);
  if (a == std::string::npos) return "";
  a += input.size();
  size_t b = t.find("prompt tokens (", a);
  if (b == std::string::npos) return "";
  b = t.rfind('[', b);
  if (b >= 4 && t.compare(b - 4, 4, "\033[2m") == 0) b -= 4;
  return b > a ? t.substr(a, b - a) : "";
}

std::string shell_quote(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += " '" + a + "'";
  return s;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST(CliChat, TerminalSessionThinkResetExit) {
  PtyChild chat(kChatArgs);
  ASSERT_TRUE(chat.started());
  ASSERT_TRUE(chat.wait_for("/exit or Ctrl-D quits", 1)) << chat.transcript();
  EXPECT_NE(chat.transcript().find("thinking on"), std::string::npos);
  ASSERT_TRUE(chat.wait_for("\n> ", 1)) << chat.transcript();  // the input prompt, shown on a terminal only

  chat.send("Hello there, who are you?");
  ASSERT_TRUE(chat.wait_for("tok/s", 1)) << chat.transcript();
  chat.send("/think off");
  ASSERT_TRUE(chat.wait_for("[thinking off for the next turns]", 1)) << chat.transcript();
  chat.send("Tell me more.");
  ASSERT_TRUE(chat.wait_for("tok/s", 2)) << chat.transcript();
  chat.send("/reset");
  ASSERT_TRUE(chat.wait_for("[conversation reset]", 1)) << chat.transcript();
  chat.send("/think on");
  ASSERT_TRUE(chat.wait_for("[thinking on for the next turns]", 1)) << chat.transcript();
  chat.send("Hello there, who are you?");
  ASSERT_TRUE(chat.wait_for("tok/s", 3)) << chat.transcript();
  chat.send("/exit");
  const int status = chat.wait_exit();
  const std::string& t = chat.transcript();
  ASSERT_NE(status, -1) << "lily chat did not exit after /exit:\n" << t;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n" << t;

  const auto s = stats_lines(t);
  ASSERT_EQ(s.size(), 3u) << t;
  // Turn 1: nothing cached yet; thinking on, so the 8 greedy tokens are reasoning, dimmed on a terminal.
  EXPECT_EQ(s[0].cached, 0);
  EXPECT_GT(s[0].prompt, 0);
  EXPECT_TRUE(s[0].generated >= 1 && s[0].generated <= 8) << s[0].generated;
  const std::string r1 = reply_after(t, "Hello there, who are you?");
  EXPECT_NE(r1.find("\033[2m"), std::string::npos) << "reasoning is dimmed: " << r1;
  EXPECT_EQ(r1.find("[thinking] "), std::string::npos);
  // Turn 2 carries the history and resumes from turn 1's prompt in the session cache; thinking off, so
  // the reply is plain content (no dim escape).
  EXPECT_GT(s[1].prompt, s[0].prompt + s[0].generated);
  EXPECT_GT(s[1].cached, 0);
  EXPECT_LT(s[1].cached, s[1].prompt);
  EXPECT_EQ(reply_after(t, "Tell me more.").find("\033[2m"), std::string::npos);
  // After /reset (and /think on) the same first message is the same prompt again, resumed whole.
  EXPECT_EQ(s[2].prompt, s[0].prompt);
  EXPECT_EQ(s[2].cached, s[2].prompt);
  EXPECT_EQ(s[2].generated, s[0].generated);
  EXPECT_EQ(s[2].finish, s[0].finish);
}

TEST(CliChat, PipedReasoningIsPrefixedOrHidden) {
  const auto dir = std::filesystem::temp_directory_path() / ("lily_chat_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto run = [&](const std::string& extra, std::string& out, std::string& err) {
    const std::string o = (dir / "out").string(), e = (dir / "err").string();
    const std::string cmd = "printf 'Hello there\\n/help\\n/exit\\n' | '" + kLily + "'" + shell_quote(kChatArgs) +
                            extra + " >'" + o + "' 2>'" + e + "'";
    const int rc = std::system(cmd.c_str());
    out = slurp(o);
    err = slurp(e);
    return rc;
  };
  std::string out, err;
  ASSERT_EQ(run("", out, err), 0) << err;
  EXPECT_EQ(out.rfind("[thinking] ", 0), 0u) << out;      // not a terminal: reasoning is prefixed
  EXPECT_EQ(out.find('\033'), std::string::npos) << out;  // and no escape sequences
  EXPECT_EQ(stats_lines(err).size(), 1u) << err;
  EXPECT_NE(err.find("thinking is on"), std::string::npos) << err;

  ASSERT_EQ(run(" --hide-reasoning", out, err), 0) << err;
  EXPECT_EQ(out.find("[thinking]"), std::string::npos) << out;
  EXPECT_EQ(out.find_first_not_of("\n"), std::string::npos) << "only reasoning was generated: " << out;
  EXPECT_EQ(stats_lines(err).size(), 1u) << err;
  std::filesystem::remove_all(dir);
}

TEST(CliChat, UnknownFlagFails) {
  const std::string cmd = "'" + kLily + "' chat --no-such-flag </dev/null >/dev/null 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
}
