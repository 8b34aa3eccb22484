#include "node/random_hex.h"

#include <cstdint>
#include <random>

namespace cuslice::node {

std::string random_hex(size_t digits) {
  std::random_device source;  // /dev/urandom on glibc
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  while (out.size() < digits) {
    uint32_t word = source();
    for (int i = 0; i < 8 && out.size() < digits; ++i, word >>= 4) out += kHex[word & 0xF];
  }
  return out;
}

}  // namespace cuslice::node
