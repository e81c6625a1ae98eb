// JPEG (libjpeg-turbo) and PNG (libpng) decoding from memory. Decoder errors
// and warnings (a truncated or corrupt JPEG is only a warning to libjpeg)
// become kiln::Error naming the file, never exit() or a partial image.
#include <algorithm>
#include <cctype>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
#include <png.h>

#include "data/data_internal.h"
#include "kiln/error.h"

namespace kiln::data::detail {
namespace {

// Images are refused before allocating when their header announces more
// decoded bytes (height x width x channels) than
//   min(256 MiB, 24768 x the file's size).
// 256 MiB is far beyond what a training set of small images holds. 24768 =
// 1032 x 8 x 3 is what no valid PNG exceeds (deflate inflates at most 1032:1,
// a 1-bit pixel becomes a byte, grey becomes RGB) and about what a
// Huffman-coded JPEG can reach (at least one bit per 8x8 block of its
// least-sampled component); only a corrupt header asks for more.
constexpr uint64_t kMaxImageBytes = uint64_t(1) << 28;
constexpr uint64_t kMaxImageBytesPerFileByte = 1032 * 8 * 3;
uint64_t max_image_bytes(size_t file_bytes) {
  return std::min<uint64_t>(kMaxImageBytes, kMaxImageBytesPerFileByte * static_cast<uint64_t>(file_bytes));
}
bool too_large(uint64_t h, uint64_t w, uint64_t c, size_t file_bytes) { return h * w * c > max_image_bytes(file_bytes); }

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jpeg_fail(j_common_ptr c) {
  auto* err = reinterpret_cast<JpegError*>(c->err);
  (*c->err->format_message)(c, err->message);
  std::longjmp(err->jump, 1);
}

// Level -1 is a warning about corrupt data (e.g. premature end of file): fail.
void jpeg_message(j_common_ptr c, int level) {
  if (level < 0) jpeg_fail(c);
}

// The setjmp frame holds only plain C state, so the longjmp skips no C++
// destructors; the caller turns a nonzero return into kiln::Error.
int jpeg_decode_raw(const uint8_t* data, size_t size, int want, DecodedImage* out, JpegError* err) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&err->mgr);
  err->mgr.error_exit = jpeg_fail;
  err->mgr.emit_message = jpeg_message;
  err->message[0] = 0;
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return 1;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  int channels = want != 0 ? want : (cinfo.num_components == 1 ? 1 : 3);
  cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  // The decoder's own buffers grow with the file's components (up to 10), not only the output's.
  if (too_large(cinfo.image_height, cinfo.image_width,
                static_cast<uint64_t>(std::max(channels, cinfo.num_components)), size)) {
    std::snprintf(err->message, sizeof err->message,
                  "its header announces %ux%u pixels, more than kiln decodes from a %zu-byte file (at most %llu "
                  "decoded bytes: 24768 per file byte, 256 MiB in all)",
                  cinfo.image_height, cinfo.image_width, size,
                  static_cast<unsigned long long>(max_image_bytes(size)));
    jpeg_destroy_decompress(&cinfo);
    return 1;
  }
  jpeg_start_decompress(&cinfo);
  if (cinfo.output_components != channels) {
    std::snprintf(err->message, sizeof err->message, "cannot convert a %d-component JPEG to %d channels",
                  cinfo.num_components, channels);
    jpeg_destroy_decompress(&cinfo);
    return 1;
  }
  out->height = cinfo.output_height;
  out->width = cinfo.output_width;
  out->channels = channels;
  out->pixels.resize(static_cast<size_t>(out->height * out->width * channels));
  const size_t stride = static_cast<size_t>(out->width * channels);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out->pixels.data() + cinfo.output_scanline * stride;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return 0;
}

DecodedImage decode_jpeg(const uint8_t* data, size_t size, const std::string& name, int want) {
  DecodedImage img;
  JpegError err;
  if (jpeg_decode_raw(data, size, want, &img, &err) != 0)
    KILN_FAIL("image: cannot decode JPEG ", name, " (", size, " bytes): ", err.message,
              "; the file is corrupt or truncated");
  return img;
}

DecodedImage decode_png(const uint8_t* data, size_t size, const std::string& name, int want) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, data, size))
    KILN_FAIL("image: cannot decode PNG ", name, " (", size, " bytes): ", image.message,
              "; the file is corrupt or truncated");
  int channels = want != 0 ? want : ((image.format & PNG_FORMAT_FLAG_COLOR) ? 3 : 1);
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  if (too_large(image.height, image.width, static_cast<uint64_t>(channels), size)) {
    png_image_free(&image);
    KILN_FAIL("image: cannot decode PNG ", name, ": its header announces ", image.height, "x", image.width,
              " pixels, more than kiln decodes from a ", size, "-byte file (at most ", max_image_bytes(size),
              " decoded bytes: 24768 per file byte, 256 MiB in all); the file is corrupt");
  }
  DecodedImage img;
  img.height = image.height;
  img.width = image.width;
  img.channels = channels;
  // Zero-filled: an alpha channel is composited onto black.
  img.pixels.assign(PNG_IMAGE_SIZE(image), 0);
  if (!png_image_finish_read(&image, nullptr, img.pixels.data(), 0, nullptr)) {
    std::string msg = image.message;
    png_image_free(&image);
    KILN_FAIL("image: cannot decode PNG ", name, " (", size, " bytes): ", msg, "; the file is corrupt or truncated");
  }
  return img;
}

}  // namespace

ImageFormat sniff_image_format(const uint8_t* data, size_t size) {
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) return ImageFormat::Jpeg;
  static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (size >= 8 && std::memcmp(data, png_sig, 8) == 0) return ImageFormat::Png;
  return ImageFormat::Unknown;
}

DecodedImage decode_image(const uint8_t* data, size_t size, const std::string& name, int want_channels) {
  KILN_ASSERT(want_channels == 0 || want_channels == 1 || want_channels == 3);
  switch (sniff_image_format(data, size)) {
    case ImageFormat::Jpeg: return decode_jpeg(data, size, name, want_channels);
    case ImageFormat::Png: return decode_png(data, size, name, want_channels);
    case ImageFormat::Unknown: break;
  }
  KILN_FAIL("image: ", name, " (", size, " bytes) is neither a JPEG nor a PNG file (its first bytes do not match",
            " either signature); the file is corrupt, empty or of another format");
}

bool has_image_extension(std::string_view path) {
  size_t dot = path.rfind('.');
  if (dot == std::string_view::npos) return false;
  std::string ext(path.substr(dot + 1));
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

namespace {
struct JpegEncodeError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
};
[[noreturn]] void jpeg_encode_fail(j_common_ptr c) {
  std::longjmp(reinterpret_cast<JpegEncodeError*>(c->err)->jump, 1);
}
int jpeg_encode_raw(const uint8_t* pixels, int height, int width, int channels, int quality, unsigned char** buf,
                    unsigned long* size) {
  jpeg_compress_struct cinfo;
  JpegEncodeError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_encode_fail;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    return 1;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, buf, size);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = channels;
  cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(pixels + static_cast<size_t>(cinfo.next_scanline) * width * channels);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return 0;
}
}  // namespace

std::vector<uint8_t> encode_jpeg(const uint8_t* pixels, int height, int width, int channels, int quality) {
  KILN_CHECK(channels == 1 || channels == 3, "encode_jpeg: channels must be 1 or 3, got ", channels);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  int r = jpeg_encode_raw(pixels, height, width, channels, quality, &buf, &size);
  std::vector<uint8_t> out;
  if (r == 0) out.assign(buf, buf + size);
  std::free(buf);
  KILN_CHECK(r == 0, "encode_jpeg: libjpeg failed to encode a ", height, "x", width, "x", channels, " image");
  return out;
}

std::vector<uint8_t> encode_png(const uint8_t* pixels, int height, int width, int channels) {
  KILN_CHECK(channels == 1 || channels == 3, "encode_png: channels must be 1 or 3, got ", channels);
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  KILN_CHECK(png_image_write_to_memory(&image, nullptr, &size, 0, pixels, 0, nullptr), "encode_png: ",
             image.message);
  std::vector<uint8_t> out(size);
  KILN_CHECK(png_image_write_to_memory(&image, out.data(), &size, 0, pixels, 0, nullptr), "encode_png: ",
             image.message);
  out.resize(size);
  return out;
}

}  // namespace kiln::data::detail
