#include "io/text_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace lily {

std::string read_text_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error(path + ": cannot open: " + std::strerror(errno));
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  bool bad = std::ferror(f) != 0;
  std::fclose(f);
  if (bad) throw Error(path + ": read error");
  return out;
}

}  // namespace lily
