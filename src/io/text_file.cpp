#include "io/text_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace lily {

std::string read_text_file(const std::string& path, size_t max_bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error(path + ": cannot open: " + std::strerror(errno));
  auto too_long = [&] {
    return Error(path + ": longer than " + std::to_string(max_bytes) + " bytes, the limit for this file");
  };
  struct stat st;
  if (::fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && static_cast<size_t>(st.st_size) > max_bytes) {
    std::fclose(f);
    throw too_long();
  }
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    if (out.size() + n > max_bytes) {
      std::fclose(f);
      throw too_long();
    }
    out.append(buf, n);
  }
  bool bad = std::ferror(f) != 0;
  std::fclose(f);
  if (bad) throw Error(path + ": read error");
  return out;
}

}  // namespace lily
