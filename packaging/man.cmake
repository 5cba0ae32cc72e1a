# Writes a man page: TEMPLATE with @OBJFS_VERSION@, @OBJFS_MAN_DATE@ (the date of the newest
# changelog.Debian entry, so that a rebuild gives the same page) and @OPTIONS@ (what
# `OBJFS --help-man` prints, the option declarations of fs/cli/mount_options.cc) filled in.
# usage: cmake -DOBJFS=BINARY -DTEMPLATE=IN -DOUTPUT=OUT -DVERSION=V -DCHANGELOG=FILE -P man.cmake
execute_process(COMMAND ${OBJFS} --help-man OUTPUT_VARIABLE options RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR options STREQUAL "")
  message(FATAL_ERROR "${OBJFS} --help-man failed (${rc})")
endif()
string(REGEX REPLACE "\n$" "" options "${options}")

file(STRINGS ${CHANGELOG} trailer REGEX "^ -- .*  [A-Z][a-z][a-z], " LIMIT_COUNT 1)
string(REGEX MATCH "[0-9]+ [A-Z][a-z][a-z] [0-9][0-9][0-9][0-9]" date "${trailer}")
if(date STREQUAL "")
  message(FATAL_ERROR "no date in the first entry of ${CHANGELOG}")
endif()
string(REPLACE " " ";" parts "${date}")
list(GET parts 0 day)
list(GET parts 1 month_name)
list(GET parts 2 year)
set(months Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec)
list(FIND months ${month_name} month)
math(EXPR month "${month} + 1")
if(month LESS 10)
  set(month "0${month}")
endif()
if(day LESS 10)
  set(day "0${day}")
endif()

file(READ ${TEMPLATE} page)
string(REPLACE "@OPTIONS@" "${options}" page "${page}")
string(REPLACE "@OBJFS_VERSION@" "${VERSION}" page "${page}")
string(REPLACE "@OBJFS_MAN_DATE@" "${year}-${month}-${day}" page "${page}")
file(WRITE ${OUTPUT} "${page}")
