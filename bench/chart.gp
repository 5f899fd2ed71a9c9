# SPDX-License-Identifier: Apache-2.0
# Draws the veth comparison of BENCHMARKS.md: one cluster of bars per
# scenario, one bar per configuration, the median with its min-max range;
# on top frames per second of wall time, below frames per CPU-second (which
# other programs on the shared CPUs do not dilute).
# bench (go run ./bench) writes the data and calls:
#   gnuplot -e "datafile='bench/veth.dat'; outfile='bench/veth.png'; nconf=8; subtitle='...'" bench/chart.gp
# The data's first line names the columns: scenario, then six per
# configuration: its name (the wall-clock median), min, max, and the
# per-CPU-second median, min, max.

if (!exists("subtitle")) subtitle = ""
set terminal pngcairo size 1400,1000 font "sans,11" noenhanced
set output outfile
set style data histogram
set style histogram errorbars gap 1 lw 1.5
set style fill solid 0.85 border rgb "black"
set boxwidth 0.9
set xtics nomirror
set border 3
set grid ytics
set yrange [0:*]
# Room above the tallest range for its label.
set offsets 0, 0, graph 0.12, 0
set key outside right top vertical autotitle columnhead
# The stack, the physical limit and the parser alone greys, xdplimit
# greens, netfilter warm.
array colours[9] = ["#9e9e9e", "#424242", "#757575", "#1b5e20", "#43a047", "#a5d6a7", "#e65100", "#b71c1c", "#6a1b9a"]
# Bars of a cluster are 1/(nconf+gap) wide around the cluster's x (0, 1,
# ...); each label sits above its bar's range.
barw = 1.0 / (nconf + 1)

set multiplot layout 2,1 title "Frames a receiver takes in on a 2-queue veth, live-frames generator on both CPUs\n".subtitle
set ylabel "Mpps, wall clock (median, bars: min-max)"
plot for [i=0:nconf-1] datafile using (column(2+6*i)):(column(3+6*i)):(column(4+6*i)):xtic(1) \
        title columnheader(2+6*i) lc rgb colours[(i % 9) + 1], \
     for [i=0:nconf-1] datafile using ($0 + (i - (nconf-1)/2.0)*barw):(column(4+6*i)):(sprintf("%.2f", column(2+6*i))) \
        with labels rotate by 90 left offset 0,0.3 font "sans,9" notitle
set ylabel "Mpps per CPU-second (median, bars: min-max)"
plot for [i=0:nconf-1] datafile using (column(5+6*i)):(column(6+6*i)):(column(7+6*i)):xtic(1) \
        title columnheader(2+6*i) lc rgb colours[(i % 9) + 1], \
     for [i=0:nconf-1] datafile using ($0 + (i - (nconf-1)/2.0)*barw):(column(7+6*i)):(sprintf("%.2f", column(5+6*i))) \
        with labels rotate by 90 left offset 0,0.3 font "sans,9" notitle
unset multiplot
