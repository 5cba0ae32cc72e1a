# Summarises repeated read samples for the benchmark tables: input lines "LABEL|MIB_PER_S|CPU"
# (CPU may be empty; a non-number in MIB_PER_S is a failure reported as it is). Prints one
# Markdown row per label, in the order labels first appear: the median rate with its range and
# the number of runs, and the median CPU seconds per GiB. Needs -F'|' and -v s=SIZE_MIB.
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
      printf "| sequential read %d MiB | %s | %s | |\n", s, l, rate[l, 1]
      continue
    }
    m = median(rate, l, n[l]); rlo = lo; rhi = hi
    c = cpu[l, 1] == "" ? "" : sprintf("%.2f", median(cpu, l, n[l]))
    printf "| sequential read %d MiB | %s | %.0f MiB/s (%.0f-%.0f, %d runs) | %s |\n", s, l, m, rlo, rhi, n[l], c
  }
}
