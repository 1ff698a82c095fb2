// TensorBoard's record checksum (runtime/tensorboard.h); the event files
// themselves are read back by TensorBoard in tests/e2e/tensorboard_check.py.
#include <gtest/gtest.h>

#include "runtime/tensorboard.h"

using namespace trainer;

// CRC-32C of TensorBoard records: the check value of the Castagnoli CRC
// (RFC 3720, "123456789" -> 0xE3069283) and 32 zero bytes (0x8A9136AA).
TEST(TensorBoard, Crc32cMatchesTheStandardCheckValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const unsigned char zeros[32] = {0};
  EXPECT_EQ(crc32c(zeros, 32), 0x8A9136AAu);
}
