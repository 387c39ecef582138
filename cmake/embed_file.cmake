# Turns a file into a C++ source holding its bytes: cmake -DIN=file -DOUT=file.cpp -DNAME=sym -P embed_file.cmake
# defines `extern const unsigned char NAME[]` and `extern const unsigned long NAME_size` in namespace lily.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "((0x..,){24})" "\\1\n" body "${body}")
file(WRITE "${OUT}" "// Generated from ${IN} by cmake/embed_file.cmake; do not edit.\nnamespace lily {\n"
     "extern const unsigned char ${NAME}[] = {\n${body}0x00};\n"
     "extern const unsigned long ${NAME}_size = ${bytes};\n}  // namespace lily\n")
