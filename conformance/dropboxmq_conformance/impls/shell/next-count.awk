# Prints each 1.2 message name with JMSXDeliveryCountI=<n+1>, n being the count the name
# carries (0 when none): the deliveries attempted once this one is.  Unparseable names
# (not 3..8 dot-separated fields) are printed unchanged.  Usage: awk -F. -f next-count.awk
NF < 3 || NF > 8 { print; next }
{
  n = 0; out = ""; props = (NF >= 8) ? $8 : ""
  k = split(props, pairs, "&")
  for (i = 1; i <= k; i++) {
    if (pairs[i] ~ /^JMSXDeliveryCount.=/) { split(pairs[i], kv, "="); n = kv[2] + 0; continue }
    out = out (out == "" ? "" : "&") pairs[i]
  }
  out = out (out == "" ? "" : "&") "JMSXDeliveryCountI=" (n + 1)
  s = $1; for (i = 2; i <= 7; i++) s = s "." (i <= NF ? $i : "")
  print s "." out
}
