# Summarises repeated samples for the benchmark tables: input lines "LABEL|VALUE|CPU" (CPU may
# be empty; a non-number in VALUE is a failure reported as it is). Prints one Markdown row per
# label, in the order labels first appear: the median value with its range and the number of
# runs, and the median CPU seconds per GiB. Needs -F'|', -v what=FIRST_CELL and -v unit=UNIT
# ("MiB/s" prints whole numbers, anything else two decimals).
!($1 in n) { order[++labels] = $1 }
{ n[$1]++; rate[$1, n[$1]] = $2; cpu[$1, n[$1]] = $3 }
function median(arr, label, count,   i, j, v, tmp) {
  for (i = 1; i <= count; i++) v[i] = arr[label, i] + 0
  for (i = 1; i <= count; i++) for (j = i + 1; j <= count; j++)
    if (v[j] < v[i]) { tmp = v[i]; v[i] = v[j]; v[j] = tmp }
  lo = v[1]; hi = v[count]
  return count % 2 ? v[(count + 1) / 2] : (v[count / 2] + v[count / 2 + 1]) / 2
}
END {
  for (k = 1; k <= labels; k++) {
    l = order[k]
    if (rate[l, 1] !~ /^[0-9.]+$/) {
      printf "| %s | %s | %s | |\n", what, l, rate[l, 1]
      continue
    }
    f = unit == "MiB/s" ? "%.0f" : "%.2f"
    m = median(rate, l, n[l]); rlo = lo; rhi = hi
    c = cpu[l, 1] == "" ? "" : sprintf("%.2f", median(cpu, l, n[l]))
    printf "| %s | %s | " f " %s (" f "-" f ", %d runs) | %s |\n", what, l, m, unit, rlo, rhi, n[l], c
  }
}
