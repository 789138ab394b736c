"""The ``podnet`` command."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from rich.console import Console

    from podnet.app.demo import DemoOptions, DemoReport
    from podnet.app.demo_node import NodeStageReport


class _Parser(argparse.ArgumentParser):
    """Bad flags give one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
    return value


def _fraction(text: str) -> float:
    value = _non_negative_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


#: where the default demo (mixed) writes its traces, in the current folder
DEMO_TRACE_FILE = "podnet-demo-trace.jsonl"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="podnet", description="Kubernetes pod-network controller")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = sub.add_parser("demo", help="run the engine on an embedded cluster and cloud")
    demo.add_argument("--provider", default="mixed",
                      help="mixed (BBC and ECS nodes, an OVN overlay), or one provider: "
                           "reference, bbc, ecs, ovn")
    demo.add_argument("--nodes", type=_positive_int, default=20)
    demo.add_argument("--pods", type=_positive_int, default=500)
    demo.add_argument("--churn", type=_positive_int, default=None,
                      help="delete and recreate this many pods after the burst "
                           "(default: a fifth of the pods for mixed, else none)")
    demo.add_argument("--seed", type=_positive_int, default=1)
    demo.add_argument("--cloud-latency-ms", type=_non_negative_float, default=0.0)
    demo.add_argument("--cloud-rate", type=_non_negative_float, default=None,
                      help="cloud calls per second per API")
    demo.add_argument("--fault-rate", type=_fraction, default=0.0)
    demo.add_argument("--trace-file", default=None,
                      help="write OTLP JSON lines here (default for mixed: "
                           f"{DEMO_TRACE_FILE}; '' for none)")
    demo.add_argument("--workers", type=_positive_int, default=4)
    demo.add_argument("--timeout", type=_non_negative_float, default=600.0)
    demo.add_argument("--json", action="store_true", help="print one JSON summary")
    demo.add_argument("--no-node-stage", action="store_true",
                      help="skip the last stage, two pods plugged and pinging on a node "
                           "(it runs by default where root and network namespaces allow)")

    sub.add_parser("plugins", help="list discovered plugins and the hooks they implement")

    run = sub.add_parser("run", help="run the controller against a cluster")
    run.add_argument("--kubeconfig", default=None,
                     help="kubeconfig file (default: in-cluster config, else $KUBECONFIG)")
    run.add_argument("--context", default=None)
    run.add_argument("--provider", action="append", default=[],
                     help="enable this built-in provider (repeatable; default: all installed)")
    run.add_argument("--config", default=None, help="config file (YAML)")
    run.add_argument("--listen", default=None,
                     help="HOST:PORT for /healthz, /readyz, /metrics (default 127.0.0.1:8080)")
    run.add_argument("--identity", default=None, help="leader-election identity")
    run.add_argument("--no-leader-elect", action="store_true")
    run.add_argument("--workers", type=_positive_int, default=None)
    run.add_argument("--trace-file", default=None)
    run.add_argument("--otlp-endpoint", default=None)
    run.add_argument("--log-format", choices=["json", "text"], default="json")

    node = sub.add_parser("node", help="run the node agent: plumb this node's pods")
    node.add_argument("--node", required=True, help="the node this agent serves")
    node.add_argument("--kubeconfig", default=None,
                      help="kubeconfig file (default: in-cluster config, else $KUBECONFIG)")
    node.add_argument("--context", default=None)
    node.add_argument("--provider", action="append", default=[],
                      help="enable this built-in provider (repeatable; default: all installed)")
    node.add_argument("--config", default=None,
                      help="config file (YAML; the controller's): each enabled provider gets "
                           "its providers.<name> section (e.g. the OVN provider's local OVS "
                           "database)")
    node.add_argument("--socket", default="/run/podnet/agent.sock",
                      help="the unix socket the CNI plugin asks (default %(default)s)")
    node.add_argument("--add-timeout", type=_non_negative_float, default=30.0,
                      help="seconds an ADD waits for the pod's networks to be Routed")
    node.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE") or "kube-system",
                      help="podnet's namespace, where the agent reports in its node's Lease "
                           "(default: $POD_NAMESPACE, else %(default)s)")
    node.add_argument("--trace-file", default=None,
                      help="write the agent's spans (OTLP JSON lines) to this file")
    node.add_argument("--otlp-endpoint", default=None,
                      help="export the agent's spans to this OTLP/HTTP endpoint")

    install = sub.add_parser("install-cni", help="put the CNI plugin and its conflist onto "
                             "this host (the node agent's init step)")
    install.add_argument("--bin-dir", default="/opt/cni/bin")
    install.add_argument("--conf-dir", default="/etc/cni/net.d")
    install.add_argument("--network", default="podnet", help="the conflist's network name")
    install.add_argument("--socket", default="/run/podnet/agent.sock",
                         help="the agent's socket, written into the conflist")

    sim = sub.add_parser("sim", help="serve a cloud simulator (bbc, ecs) on loopback")
    sim.add_argument("cloud", choices=["bbc", "ecs"])
    sim.add_argument("options", nargs=argparse.REMAINDER,
                     help="the simulator's own flags, e.g. --port 0")

    from podnet.app.status import add_audit_arguments, add_status_arguments

    add_status_arguments(sub.add_parser(
        "status", help="per node: pool and interfaces; per pod: its networks"))
    add_audit_arguments(sub.add_parser(
        "audit", help="records against the cloud's inventory: leaked and lost addresses"))

    apiserver = sub.add_parser("apiserver", help="serve the Kubernetes API emulator")
    from podnet.sim.apiserver import add_arguments

    add_arguments(apiserver)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    if args.command == "demo":
        return _demo(parser, args)
    if args.command == "plugins":
        return _plugins()
    if args.command == "run":
        return _run(parser, args)
    if args.command == "node":
        return _node(args)
    if args.command == "install-cni":
        from podnet.app.install import install_cni

        for path in install_cni(args.bin_dir, args.conf_dir, network=args.network,
                                socket_path=args.socket):
            print(f"installed {path}")
        return 0
    if args.command == "sim":
        import importlib

        try:
            module = importlib.import_module(f"podnet.plugins.{args.cloud}.sim")
        except ModuleNotFoundError:
            parser.error(f"the {args.cloud} simulator is not installed")
        code: int = module.main(args.options)
        return code
    if args.command == "status":
        from podnet.app.status import run_status

        return run_status(args)
    if args.command == "audit":
        from podnet.app.status import run_audit

        return run_audit(args)
    if args.command == "apiserver":
        from podnet.sim.apiserver import run as run_apiserver

        return run_apiserver(args)
    parser.error(f"unknown command {args.command!r}")


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    import attrs

    from podnet.app.host import Host, JsonLogFormatter
    from podnet.core.cluster.kube import KubeCluster
    from podnet.core.config import Config, load_config
    from podnet.core.errors import ConfigError
    from podnet.core.plugin import load_plugins, new_plugin_manager
    from podnet.core.tracing import Tracing, make_tracer_provider

    if args.log_format == "json":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonLogFormatter())
    try:
        config = load_config(args.config) if args.config else Config()
        if args.workers:
            config = attrs.evolve(config, workers=args.workers)
        if args.listen:
            config = attrs.evolve(config, listen=args.listen)
        pm = new_plugin_manager()
        load_plugins(pm, builtins=args.provider or None)
        cluster = KubeCluster.connect(args.kubeconfig, args.context)
        tracer_provider = None
        if args.trace_file or args.otlp_endpoint:
            tracer_provider = make_tracer_provider(trace_file=args.trace_file,
                                                   otlp_endpoint=args.otlp_endpoint)
        host = Host(cluster, pm, config, identity=args.identity,
                    tracing=Tracing(tracer_provider),
                    leader_elect=False if args.no_leader_elect else None)
    except ConfigError as exc:
        print(f"podnet run: {exc}", file=sys.stderr)
        return 2
    # which replica wrote what, in the API server's audit log
    cluster.api_client.user_agent = f"podnet/{host.identity}"
    host.install_signal_handlers()
    host.serve(config.listen)
    code = host.run()
    if tracer_provider is not None:
        tracer_provider.shutdown()
    return code


def _node(args: argparse.Namespace) -> int:
    import signal
    import threading

    from podnet.app.node import run as run_node
    from podnet.core.cluster.kube import KubeCluster
    from podnet.core.config import load_config
    from podnet.core.errors import ConfigError
    from podnet.core.plugin import Providers, load_plugins, new_plugin_manager
    from podnet.core.tracing import Tracing

    try:
        pm = new_plugin_manager()
        load_plugins(pm, builtins=args.provider or None)
        providers = Providers(pm)
        if args.config:
            # the sections of providers this agent runs; the others are the controller's
            for name, section in load_config(args.config).providers.items():
                if name in providers:
                    providers.configure(name, section)
        cluster = KubeCluster.connect(args.kubeconfig, args.context)
    except ConfigError as exc:
        print(f"podnet node: {exc}", file=sys.stderr)
        return 2
    cluster.api_client.user_agent = f"podnet-node/{args.node}"
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    tracer_provider = None
    if args.trace_file or args.otlp_endpoint:
        from podnet.core.tracing import make_tracer_provider

        tracer_provider = make_tracer_provider(service_name="podnet-node",
                                               trace_file=args.trace_file,
                                               otlp_endpoint=args.otlp_endpoint)
    try:
        return run_node(cluster, providers, node=args.node, socket_path=args.socket,
                        add_timeout=args.add_timeout, namespace=args.namespace,
                        tracing=Tracing(tracer_provider), stop=stop)
    finally:
        if tracer_provider is not None:
            tracer_provider.shutdown()


def _demo(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from podnet.app.demo import DemoOptions, run_demo

    if args.nodes < 1:
        parser.error("argument --nodes: must be at least 1")
    mixed = args.provider == "mixed"
    if args.churn is None:
        args.churn = args.pods // 5 if mixed else 0
    if args.churn > args.pods:
        parser.error(f"argument --churn: {args.churn} exceeds --pods {args.pods}")
    if args.trace_file is None and mixed:
        args.trace_file = DEMO_TRACE_FILE
    from podnet.app.demo import demo_providers

    available = demo_providers()
    if args.provider not in available:
        parser.error(f"argument --provider: {args.provider!r} is not available "
                     f"(available: {', '.join(available)})")
    opts = DemoOptions(
        provider=args.provider, nodes=args.nodes, pods=args.pods, churn=args.churn,
        seed=args.seed, cloud_latency_ms=args.cloud_latency_ms, cloud_rate=args.cloud_rate,
        fault_rate=args.fault_rate, trace_file=args.trace_file or None,
        workers=max(1, args.workers),
        timeout_s=args.timeout, node_stage=not args.no_node_stage,
    )
    try:
        if args.json:
            report = run_demo(opts)
            print(json.dumps(report.as_json(), sort_keys=True))
        else:
            report = _demo_with_progress(opts)
    except KeyboardInterrupt:  # what the demo made is removed by then
        print("podnet demo: interrupted", file=sys.stderr)
        return 130
    return 0 if report.ok else 1


def _demo_with_progress(opts: DemoOptions) -> DemoReport:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskID,
        TimeElapsedColumn,
    )
    from rich.table import Table

    from podnet.app.demo import run_demo

    console = Console()
    tasks: dict[str, TaskID] = {}
    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as bar:
        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(f"{stage}: pods routed", total=total)
            bar.update(tasks[stage], completed=done)

        report = run_demo(opts, progress)
    for name, why in report.skipped.items():
        console.print(f"[yellow]{name} left out:[/yellow] {why}")
    names = list(report.providers)
    table = Table(title=f"podnet demo — {report.provider}: {report.pods} pods, "
                        f"{report.duration_s} s, {'settled' if report.settled else 'NOT settled'}")
    table.add_column("")
    for name in names:
        table.add_column(name, justify="right")
    if len(names) > 1:
        table.add_column("total", justify="right")
    rows: list[tuple[str, list[int]]] = [
        ("nodes", [p.nodes for p in report.providers.values()]),
        ("pod networks", [p.pod_networks for p in report.providers.values()]),
        ("routed", [p.routed for p in report.providers.values()]),
        ("released", [p.released for p in report.providers.values()]),
        # an overlay's "cloud" is its Northbound DB: its calls are transactions
        ("cloud calls", [p.cloud_calls.get("ovn_transactions", sum(p.cloud_calls.values()))
                         for p in report.providers.values()]),
        ("leaked IPs", [p.leaked_ips for p in report.providers.values()]),
        ("duplicate IPs", [p.duplicate_ips for p in report.providers.values()]),
    ]
    for label, values in rows:
        cells = [str(v) for v in values]
        if len(names) > 1:
            cells.append(str(report.duplicate_ips if label == "duplicate IPs" else sum(values)))
        table.add_row(label, *cells)
    console.print(table)
    console.print(f"pods with every network routed: {report.routed} / {report.pods}; "
                  + ", ".join(f"{k} {v}" for k, v in report.transitions.items()))
    _print_node_stage(console, report.node, "on a node")
    _print_node_stage(console, report.ovn_node, "on an OVN node")
    _print_node_stage(console, report.ecs_node, "on an ECS node")
    _print_node_stage(console, report.bbc_node, "on a BBC node")
    console.print("pods answering a ping: " + ", ".join(
        f"{name} {count}" for name, count in report.answering().items()), highlight=False)
    if report.trace_file:
        console.print(f"traces written to {report.trace_file}")
    return report


def _print_node_stage(console: Console, node: NodeStageReport, title: str) -> None:
    """A stage "on a node": each pod's interface as its record has it, the ping."""
    if not node.ran:
        console.print(f"{title}: skipped: {node.skipped}", highlight=False)
        return
    console.print(f"{title}: {node.node} ({node.provider} provider, network namespace "
                  f"{node.node_netns})", highlight=False)
    for pod in node.pods:
        console.print(f"  {pod.pod}: {pod.interface} {pod.mac} {pod.address}, "
                      f"ADD {pod.add_ms:g} ms", highlight=False)
    if node.ping_sent:
        console.print(f"  {node.ping_from} -> {node.ping_to}: "
                      f"{node.ping_replies}/{node.ping_sent} replies; pods answering a ping: "
                      f"{node.pods_answering}/{len(node.pods)}", highlight=False)
    if node.error is not None:
        console.print(f"  [red]failed:[/red] {node.error}")
    else:
        console.print("  DEL both, pods deleted, records released; "
                      + ("namespaces removed" if node.cleaned else "[red]namespaces left[/red]"))


def _plugins() -> int:
    from rich.console import Console
    from rich.table import Table

    from podnet.core.plugin import load_plugins, new_plugin_manager, plugin_records

    pm = new_plugin_manager()
    load_plugins(pm)
    table = Table(title="podnet plugins")
    for col in ("name", "version", "source", "hooks"):
        table.add_column(col)
    for rec in plugin_records(pm):
        table.add_row(rec.name, rec.version, rec.source,
                      ", ".join(h.removeprefix("podnet_") for h in rec.hooks))
    Console(width=200).print(table)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
