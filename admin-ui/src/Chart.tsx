import { useEffect, useRef } from 'react'
import uPlot from 'uplot'

import { colorFor, dashFor, sparse, type Series } from './chartdata'
import { Legend } from './Legend'

/**
 * Chart draws time series (x: unix seconds) with uPlot, as lines that stay
 * apart when they overlap: each series has its colour (colorFor: the same
 * on every chart) and its dash pattern, and the legend under the chart
 * shows every series' value (its sum over the range, or its latest value)
 * without hovering.
 */
export function Chart({
  x,
  series,
  dark,
  height = 260,
  testid = 'usage-chart',
  yFormat,
}: {
  x: number[]
  series: Series[]
  dark: boolean
  height?: number
  testid?: string
  /** how the y axis writes its values (default uPlot's numbers) */
  yFormat?: (v: number) => string
}) {
  const el = useRef<HTMLDivElement>(null)
  useEffect(() => {
    const host = el.current!
    const axis = { stroke: dark ? '#8b949e' : '#57606a', grid: { stroke: dark ? '#21262d' : '#eaeef2' }, ticks: { stroke: dark ? '#30363d' : '#d0d7de' } }
    const opts: uPlot.Options = {
      width: host.clientWidth || 800,
      height,
      series: [
        {},
        ...series.map((s, i) => ({
          label: s.label,
          stroke: colorFor(s.label),
          dash: dashFor(i),
          width: 2,
          spanGaps: false,
          // Points where lines cannot show the values: few buckets, or a
          // series mostly empty (latency in a quiet window) whose values
          // have no neighbour to draw a line to.
          points: { show: x.length < 60 || sparse(s.values), size: 5, fill: colorFor(s.label) },
        })),
      ],
      axes: [axis, { ...axis, size: yFormat ? 84 : 60, ...(yFormat ? { values: (_u: uPlot, splits: number[]) => splits.map(yFormat) } : {}) }],
      legend: { show: false }, // ours, below, shows the values without hovering
    }
    const plot = new uPlot(opts, [x, ...series.map((s) => s.values)] as uPlot.AlignedData, host)
    const ro = new ResizeObserver(() => plot.setSize({ width: host.clientWidth, height }))
    ro.observe(host)
    return () => {
      ro.disconnect()
      plot.destroy()
    }
  }, [x, series, dark, height, yFormat])
  return (
    <div data-testid={testid}>
      <div ref={el} className="chart" />
      <Legend series={series} />
    </div>
  )
}
