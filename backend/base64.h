// Standard base64 (RFC 4648, with padding), for the Content-MD5 header S3 checks uploads against.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace objfs {

std::string Base64(std::span<const uint8_t> data);

}  // namespace objfs
