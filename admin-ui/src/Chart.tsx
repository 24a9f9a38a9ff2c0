import { useEffect, useRef } from 'react'
import uPlot from 'uplot'

import type { Series } from './chartdata'

const palette = ['#2f81f7', '#3fb950', '#d29922', '#f85149', '#a371f7', '#db61a2', '#39c5cf', '#8b949e', '#e3b341', '#56d364']

/** Chart draws time series (x: unix seconds) with uPlot, stacked-free lines. */
export function Chart({ x, series, dark, height = 260 }: { x: number[]; series: Series[]; dark: boolean; height?: number }) {
  const el = useRef<HTMLDivElement>(null)
  useEffect(() => {
    const host = el.current!
    const axis = { stroke: dark ? '#8b949e' : '#57606a', grid: { stroke: dark ? '#21262d' : '#eaeef2' }, ticks: { stroke: dark ? '#30363d' : '#d0d7de' } }
    const opts: uPlot.Options = {
      width: host.clientWidth || 800,
      height,
      series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: palette[i % palette.length], width: 2, points: { show: x.length < 60 } }))],
      axes: [axis, axis],
      legend: { show: true },
    }
    const plot = new uPlot(opts, [x, ...series.map((s) => s.values)] as uPlot.AlignedData, host)
    const ro = new ResizeObserver(() => plot.setSize({ width: host.clientWidth, height }))
    ro.observe(host)
    return () => {
      ro.disconnect()
      plot.destroy()
    }
  }, [x, series, dark, height])
  return <div ref={el} className="chart" data-testid="usage-chart" />
}

