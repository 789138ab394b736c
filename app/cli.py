"""The ``podnet`` command."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from podnet.core.version import podnet_version

if TYPE_CHECKING:
    from rich.console import Console

    from podnet.app.demo import DemoOptions, DemoReport
    from podnet.app.demo_node import NodeStageReport
    from podnet.core.config import Config


class _Parser(argparse.ArgumentParser):
    """Bad flags give one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _health_listen(text: str) -> str:
    from podnet.node.health import parse_health_listen

    try:
        parse_health_listen(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = _non_negative_float(text)
    if value == 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
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


#: the commands that run until stopped: INFO and (controller, agent) JSON lines by
#: default; the others print their own output and log warnings only, as text
_DAEMONS = frozenset({"run", "node", "apiserver", "sim"})
#: connections the controller holds besides its workers' writes: a watch for each of
#: its caches (7), the Event sender, the leader lease, and one spare
_STANDING_CONNECTIONS = 10
_JSON_BY_DEFAULT = frozenset({"run", "node"})
_VERBOSE_HELP = "debug logs of podnet (libraries stay at WARNING); before or after the command"
_LOG_FORMAT_HELP = ("json: one JSON object a line (default for run and node); text: for "
                    "people (default for the other commands)")


def _add_log_flags(parser: argparse.ArgumentParser, dest_prefix: str = "") -> None:
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        dest=f"{dest_prefix}verbose", help=_VERBOSE_HELP)
    parser.add_argument("--log-format", choices=["json", "text"], default=None,
                        dest=f"{dest_prefix}log_format", help=_LOG_FORMAT_HELP)




def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="podnet", description="Kubernetes pod-network controller")
    _add_log_flags(parser)
    parser.add_argument("--version", action="version", version=f"podnet {podnet_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = sub.add_parser("demo", help="run the engine on an embedded cluster and cloud")
    demo.add_argument("--provider", default="mixed",
                      help="mixed (BBC and ECS nodes, an OVN overlay), or one provider: "
                           "reference, bbc, ecs, ovn")
    demo.add_argument("--nodes", type=_positive_int, default=20,
                      help="nodes of the embedded cluster (default %(default)s)")
    demo.add_argument("--pods", type=_positive_int, default=500,
                      help="pods created in the burst (default %(default)s)")
    demo.add_argument("--churn", type=_positive_int, default=None,
                      help="delete and recreate this many pods after the burst "
                           "(default: a fifth of the pods for mixed, else none)")
    demo.add_argument("--seed", type=_positive_int, default=1,
                      help="seed of the stand-in clouds' randomness: a run repeats with it "
                           "(default %(default)s)")
    demo.add_argument("--cloud-latency-ms", type=_non_negative_float, default=0.0,
                      help="milliseconds each stand-in cloud call takes (default %(default)s)")
    demo.add_argument("--cloud-rate", type=_non_negative_float, default=None,
                      help="cloud calls per second per API")
    demo.add_argument("--fault-rate", type=_fraction, default=0.0,
                      help="fraction of cloud calls that fail, 0 to 1 (default %(default)s)")
    demo.add_argument("--trace-file", default=None,
                      help="write OTLP JSON lines here (default for mixed: "
                           f"{DEMO_TRACE_FILE}; '' for none)")
    demo.add_argument("--otlp-endpoint", default=None,
                      help="export spans to this OTLP/HTTP endpoint, the full signal URL (e.g. "
                           "http://127.0.0.1:4318/v1/traces); the OTEL_* environment "
                           "(OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, ...) is honoured "
                           "without it")
    demo.add_argument("--workers", type=_positive_int, default=4,
                      help="reconcile workers (default %(default)s)")
    demo.add_argument("--timeout", type=_non_negative_float, default=600.0,
                      help="seconds to wait for the cluster to settle (default %(default)s)")
    demo.add_argument("--json", action="store_true", help="print one JSON summary")
    demo.add_argument("--no-node-stage", action="store_true",
                      help="skip the last stage, two pods plugged and pinging on a node "
                           "(it runs by default where root and network namespaces allow)")

    plugins = sub.add_parser("plugins",
                             help="list discovered plugins and the hooks they implement")
    plugins.add_argument("-o", "--output", choices=["table", "json"], default="table",
                         help="a table for people, or JSON for scripts (default %(default)s)")

    run = sub.add_parser("run", help="run the controller against a cluster")
    run.add_argument("--kubeconfig", default=None,
                     help="kubeconfig file (default: in-cluster config, else $KUBECONFIG)")
    run.add_argument("--context", default=None,
                     help="the kubeconfig context to use (default: its current context)")
    run.add_argument("--provider", action="append", default=[],
                     help="enable this built-in provider (repeatable; default: all installed)")
    run.add_argument("--config", default=None, help="config file (YAML)")
    run.add_argument("--listen", default=None,
                     help="HOST:PORT for /healthz, /readyz, /metrics (default 127.0.0.1:8080)")
    run.add_argument("--identity", default=None, help="leader-election identity")
    run.add_argument("--no-leader-elect", action="store_true",
                     help="lead without the Lease (one replica only: two would both write)")
    run.add_argument("--workers", type=_positive_int, default=None,
                     help="reconcile workers (default: the config file's workers)")
    run.add_argument("--trace-file", default=None,
                     help="write the controller's spans (OTLP JSON lines) to this file")
    run.add_argument("--otlp-endpoint", default=None,
                     help="export spans to this OTLP/HTTP endpoint, the full signal URL (e.g. "
                           "http://127.0.0.1:4318/v1/traces); the OTEL_* environment "
                           "(OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, ...) is honoured "
                           "without it")

    node = sub.add_parser("node", help="run the node agent: plumb this node's pods")
    node.add_argument("--node", required=True, help="the node this agent serves")
    node.add_argument("--kubeconfig", default=None,
                      help="kubeconfig file (default: in-cluster config, else $KUBECONFIG)")
    node.add_argument("--context", default=None,
                      help="the kubeconfig context to use (default: its current context)")
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
    node.add_argument("--read-timeout", type=_positive_float, default=30.0,
                      help="close a connection that sends nothing for this many seconds "
                           "(default %(default)s)")
    node.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE") or "kube-system",
                      help="podnet's namespace, where the agent reports in its node's Lease "
                           "(default: $POD_NAMESPACE, else %(default)s)")
    node.add_argument("--network-policy", choices=("podnet", "none"), default=None,
                      help="who enforces NetworkPolicy for this node's pods: podnet (the "
                           "agent, in nftables) or none (another engine chained after "
                           "podnet: the agent removes its table); default: the config's "
                           "networkPolicy, else podnet")
    node.add_argument("--health-listen", default="127.0.0.1:9254", type=_health_listen,
                      help="HOST:PORT or unix:PATH for /healthz, /readyz, /metrics (default "
                           "%(default)s, loopback: the agent is on the host network; '' for "
                           "none)")
    node.add_argument("--stuck-after", type=_positive_float, default=300.0,
                      help="seconds one of the agent's loops may go without turning before "
                           "/healthz fails (default %(default)s)")
    node.add_argument("--trace-file", default=None,
                      help="write the agent's spans (OTLP JSON lines) to this file")
    node.add_argument("--otlp-endpoint", default=None,
                      help="export spans to this OTLP/HTTP endpoint, the full signal URL (e.g. "
                           "http://127.0.0.1:4318/v1/traces); the OTEL_* environment "
                           "(OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, ...) is honoured "
                           "without it")

    install = sub.add_parser("install-cni", help="put the CNI plugin and its conflist onto "
                             "this host (the node agent's init step)")
    uninstall = sub.add_parser("uninstall-cni", help="remove podnet's CNI plugin and conflist "
                               "from this host, and nothing else")
    # the same places and modes for both, so that an uninstall finds what the install put
    for command in (install, uninstall):
        command.add_argument("--bin-dir", default="/opt/cni/bin",
                             help="the CNI plugin binaries' directory (default %(default)s)")
        command.add_argument("--conf-dir", default="/etc/cni/net.d",
                             help="the conflist's directory (default %(default)s)")
        command.add_argument("--mode", choices=("podnet", "ipam"), default="podnet",
                             help="podnet: podnet-cni is the pods' plugin (podnet-cni, "
                                  "podnet-ipam and the conflist); ipam: chaining, another "
                                  "plugin plumbs and asks podnet-ipam for addresses "
                                  "(podnet-ipam alone, no conflist); default %(default)s")
    install.add_argument("--network", default="podnet", help="the conflist's network name")
    install.add_argument("--socket", default="/run/podnet/agent.sock",
                         help="the agent's socket, written into the conflist")
    install.add_argument("--plugin", default=None,
                         help="the plugin executable to copy (default: $PODNET_CNI_PLUGIN, "
                              "else podnet-cni beside this podnet command)")

    sim = sub.add_parser("sim", help="serve a cloud simulator (bbc, ecs) on loopback")
    sim.add_argument("cloud", choices=["bbc", "ecs"], help="which cloud to simulate")
    sim.add_argument("options", nargs=argparse.REMAINDER,
                     help="the simulator's own flags, e.g. --port 0")

    from podnet.app.audit import add_audit_arguments
    from podnet.app.status import STATUS_EPILOG, add_status_arguments

    add_status_arguments(sub.add_parser(
        "status", help="why a pod's network is not ready: the leader, each node's pool and "
                       "agent, each pod's networks or why it has none",
        description="What the records, the agents' reports and the leader Lease say, read "
                    "once and never written: why a pod's network is not ready.",
        epilog=STATUS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter))
    add_audit_arguments(sub.add_parser(
        "audit", help="records against the cloud's inventory: leaked and lost addresses"))

    apiserver = sub.add_parser("apiserver", help="serve the Kubernetes API emulator")
    from podnet.sim.apiserver import add_arguments

    add_arguments(apiserver)
    # the same flags after the command (`podnet run -v`), kept apart from the ones before
    # it: a subcommand's defaults would otherwise overwrite them
    for command in sub.choices.values():
        _add_log_flags(command, dest_prefix="sub_")
    return parser


def _configure_logging(args: argparse.Namespace) -> None:
    from podnet.app.logs import configure_logging

    command = args.command
    log_format = args.sub_log_format or args.log_format or (
        "json" if command in _JSON_BY_DEFAULT else "text")
    configure_logging(verbosity=args.verbose + args.sub_verbose, log_format=log_format,
                      default=logging.INFO if command in _DAEMONS else logging.WARNING)


def _install_cni(args: argparse.Namespace) -> int:
    """install-cni / uninstall-cni: each refusal is one line on stderr naming the path,
    exit 2 (an init container's log shows it whole)."""
    from podnet.app.install import InstallError, install_cni, uninstall_cni

    prog = f"podnet {args.command}"

    def warn(message: str) -> None:
        print(f"{prog}: warning: {message}", file=sys.stderr)

    try:
        if args.command == "install-cni":
            for path in install_cni(args.bin_dir, args.conf_dir, network=args.network,
                                    socket_path=args.socket, plugin=args.plugin,
                                    mode=args.mode, warn=warn):
                print(f"installed {path}")
            return 0
        done = uninstall_cni(args.bin_dir, args.conf_dir, mode=args.mode)
    except InstallError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    for path in done.removed:
        print(f"removed {path}")
    for line in done.left:
        warn(line)
    return 0


#: exit status when the reader of our output went away (``podnet status | head``): a
#: shell's for a command ended by SIGPIPE
EXIT_PIPE_CLOSED = 128 + 13


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # the reader had enough: no traceback; what is still buffered goes nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE_CLOSED


def _main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args)
    if args.command == "demo":
        return _demo(parser, args)
    if args.command == "plugins":
        return _plugins(args.output)
    if args.command == "run":
        return _run(parser, args)
    if args.command == "node":
        return _node(args)
    if args.command in ("install-cni", "uninstall-cni"):
        return _install_cni(args)
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
        from podnet.app.audit import run_audit

        return run_audit(args)
    if args.command == "apiserver":
        from podnet.sim.apiserver import run as run_apiserver

        return run_apiserver(args)
    parser.error(f"unknown command {args.command!r}")


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from podnet.app.host import Host, quiet_http_retries
    from podnet.core.cluster.kube import KubeCluster
    from podnet.core.config import Config, load_config, with_overrides
    from podnet.core.errors import ConfigError
    from podnet.core.plugin import load_plugins, new_plugin_manager, require_installed
    from podnet.core.tracing import Tracing, tracer_provider_from_env

    quiet_http_retries()
    tracer_provider = None
    try:
        config = with_overrides(load_config(args.config) if args.config else Config(),
                                workers=args.workers, listen=args.listen)
        pm = new_plugin_manager()
        load_plugins(pm, builtins=args.provider or None)
        require_installed(pm, _named_providers(config))
        # every worker writing while every watch is open, each on a kept-alive connection
        cluster = KubeCluster.connect(args.kubeconfig, args.context,
                                      connections=config.workers + _STANDING_CONNECTIONS)
        tracer_provider = tracer_provider_from_env(trace_file=args.trace_file,
                                                   otlp_endpoint=args.otlp_endpoint)
        host = Host(cluster, pm, config, identity=args.identity,
                    tracing=Tracing(tracer_provider),
                    leader_elect=False if args.no_leader_elect else None)
        # which replica wrote what, in the API server's audit log
        cluster.api_client.user_agent = f"podnet/{host.identity}"
        cluster.on_request = host.metrics.kube_request
        # Events from a thread of their own: a worker never waits for one
        cluster.queue_events().on_drop = host.metrics.event_dropped
        try:
            host.serve(config.listen)
        except OSError as exc:  # busy, or not an address of this host
            print(f"podnet run: --listen {config.listen}: {exc.strerror or exc}",
                  file=sys.stderr)
            return 2
        host.install_signal_handlers()
        # a server briefly down is waited for; a wrong address or credentials end here
        answered = host.wait_for_api(cluster)
    except ConfigError as exc:
        if tracer_provider is not None:
            tracer_provider.shutdown()
        print(f"podnet run: {exc}", file=sys.stderr)
        return 2
    code = host.run() if answered else 0
    cluster.close()  # the Events still queued are sent
    if tracer_provider is not None:
        tracer_provider.shutdown()
    return code


def _named_providers(config: Config) -> list[tuple[str, str | None]]:
    """Every provider the config names, with the key naming it."""
    return [("defaultProvider", config.default_provider),
            *((f"providers.{name}", name) for name in config.providers),
            *((f"policies.{name}", name) for name in config.policies),
            *((f"nodeProviders[{i}].provider", rule.provider)
              for i, rule in enumerate(config.node_providers)),
            *((f"networks.{network}.provider", name)
              for network, name in config.networks.items())]


def _node(args: argparse.Namespace) -> int:
    import signal
    import threading

    from podnet.app.host import quiet_http_retries, wait_for_api
    from podnet.core.cluster.kube import KubeCluster
    from podnet.core.config import load_config
    from podnet.core.errors import ConfigError
    from podnet.core.plugin import Providers, load_plugins, new_plugin_manager, require_installed
    from podnet.core.tracing import Tracing, tracer_provider_from_env
    from podnet.node import run as run_node
    from podnet.node.health import HealthServer, Watch
    from podnet.node.health import serve as serve_health
    from podnet.node.metrics import AgentMetrics

    quiet_http_retries()
    health: HealthServer | None = None
    tracer_provider = None
    try:
        tracer_provider = tracer_provider_from_env(service_name="podnet-node",
                                                   trace_file=args.trace_file,
                                                   otlp_endpoint=args.otlp_endpoint)
        pm = new_plugin_manager()
        load_plugins(pm, builtins=args.provider or None)
        providers = Providers(pm)
        config = None
        if args.config:
            config = load_config(args.config)
            # a provider this agent would plumb for (the default network's, the nodes'
            # rules): its SDK must be here; the sections of the others are the controller's
            require_installed(pm, [item for item in _named_providers(config)
                                   if not item[0].startswith(("providers.", "policies."))])
            for name, section in config.providers.items():
                if name in providers:
                    providers.configure(name, section)
        network_policy = args.network_policy or (config.network_policy if config is not None
                                                  else "podnet")
        cluster = KubeCluster.connect(args.kubeconfig, args.context)
        cluster.api_client.user_agent = f"podnet-node/{args.node}"
        watch = Watch(AgentMetrics(podnet_version()))
        try:
            # before the API server is asked: a probe meanwhile says what the agent waits for
            health = serve_health(args.health_listen, watch, wait_if_busy=True)
        except OSError as exc:  # not an address of this host, a directory not there
            print(f"podnet node: --health-listen {args.health_listen}: "
                  f"{exc.strerror or exc}", file=sys.stderr)
            return 2
        watch.where = health.where if health is not None else None
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        # a server briefly down is waited for; a wrong address or credentials end here
        if not wait_for_api(cluster, stop, waiting=watch.waiting_for_api):
            return 0
        return run_node(cluster, providers, node=args.node, socket_path=args.socket,
                        add_timeout=args.add_timeout, namespace=args.namespace,
                        tracing=Tracing(tracer_provider), stop=stop,
                        read_timeout=args.read_timeout,
                        network_policy=network_policy != "none", watch=watch,
                        stuck_after=args.stuck_after)
    except ConfigError as exc:
        print(f"podnet node: {exc}", file=sys.stderr)
        return 2
    finally:
        if health is not None:
            health.close()
        if tracer_provider is not None:
            tracer_provider.shutdown()


def _demo(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from podnet.app.demo import DemoOptions, run_demo
    from podnet.hookspecs.demo import DemoUnavailable

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
        from podnet.core.plugin import missing_extra

        for name in ("bbc", "ecs") if mixed else (args.provider,):
            missing = missing_extra(name, "--provider")
            if missing is not None:
                print(f"podnet demo: {missing}", file=sys.stderr)
                return 2
        parser.error(f"argument --provider: {args.provider!r} is not available "
                     f"(available: {', '.join(available)})")
    from podnet.core.errors import ConfigError
    from podnet.core.tracing import otel_exporters

    try:
        otel_exporters()  # a bad OTEL_* value: one line before anything starts
    except ConfigError as exc:
        print(f"podnet demo: {exc}", file=sys.stderr)
        return 2
    opts = DemoOptions(
        provider=args.provider, nodes=args.nodes, pods=args.pods, churn=args.churn,
        seed=args.seed, cloud_latency_ms=args.cloud_latency_ms, cloud_rate=args.cloud_rate,
        fault_rate=args.fault_rate, trace_file=args.trace_file or None,
        otlp_endpoint=args.otlp_endpoint,
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
    except DemoUnavailable as exc:  # the one provider asked for needs a program installed
        print(f"podnet demo: --provider {args.provider}: {exc}", file=sys.stderr)
        return 2
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
    if report.subnets:
        from podnet.app.status import _subnets_table

        console.print(_subnets_table(report.subnets))
    console.print(f"pods with every network routed: {report.routed} / {report.pods}; "
                  + ", ".join(f"{k} {v}" for k, v in report.transitions.items()))
    _print_node_stage(console, report.node, "on a node")
    _print_node_stage(console, report.ovn_node, "on an OVN node")
    _print_node_stage(console, report.ecs_node, "on an ECS node")
    _print_node_stage(console, report.bbc_node, "on a BBC node")
    console.print("pods answering a ping: " + ", ".join(
        f"{name} {count}" for name, count in report.answering().items()), highlight=False)
    console.print("NetworkPolicy pairs: " + "; ".join(
        f"{name} {pairs}" for name, pairs in report.policy_pairs().items()), highlight=False)
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
    _print_policy_part(console, node)
    if node.error is not None:
        console.print(f"  [red]failed:[/red] {node.error}")
    else:
        console.print("  DEL both, pods deleted, records released; "
                      + ("namespaces removed" if node.cleaned else "[red]namespaces left[/red]"))


def _print_policy_part(console: Console, node: NodeStageReport) -> None:
    """A stage's NetworkPolicy part: the policies and their programmed state, each pair
    before and after them."""
    if node.policy_skipped is not None:
        console.print(f"  NetworkPolicy [yellow]not enforced here[/yellow]: "
                      f"{node.policy_skipped}", highlight=False)
        return
    if not node.policy_enforcer:
        return  # the stage failed before
    for row in node.policies:
        programmed = row["programmed"] or {}
        console.print(f"  NetworkPolicy {row['namespace']}/{row['name']}: "
                      f"{programmed.get('reason')} ({programmed.get('message')}), "
                      f"{row['members']} member(s)", highlight=False)
    if node.policies:
        console.print(f"  enforced by the {node.policy_enforcer}, programmed in "
                      f"{node.policy_programmed_ms:g} ms", highlight=False)
    for probe in node.probes:
        if not probe.after:
            continue
        mark = "" if probe.ok else " [red]NOT AS THE POLICY SAYS[/red]"
        console.print(f"  {probe.source} -> {probe.target} tcp/{probe.port}: before "
                      f"{probe.before}, after {probe.after} ({probe.expected})" + mark,
                      highlight=False)
    if node.policies_removed:
        console.print("  policies deleted, what they programmed removed", highlight=False)


def _plugins(output: str = "table") -> int:
    from rich.console import Console
    from rich.table import Table

    from podnet.core.plugin import (
        load_plugins,
        new_plugin_manager,
        plugin_records,
        skipped_providers,
    )

    pm = new_plugin_manager()
    load_plugins(pm)
    if output == "json":
        print(json.dumps({
            "plugins": [{"name": r.name, "version": r.version, "source": r.source,
                         "hooks": list(r.hooks)} for r in plugin_records(pm)],
            "not_installed": [{"name": name, "module": m.module, "extra": m.extra}
                              for name, m in sorted(skipped_providers(pm).items())]},
            sort_keys=True))
        return 0
    table = Table(title="podnet plugins")
    for col in ("name", "version", "source", "hooks"):
        table.add_column(col)
    for rec in plugin_records(pm):
        table.add_row(rec.name, rec.version, rec.source,
                      ", ".join(h.removeprefix("podnet_") for h in rec.hooks))
    for name, missing in sorted(skipped_providers(pm).items()):
        table.add_row(name, "-", "not installed",
                      f"needs {missing.module}: pip install 'podnet\\[{missing.extra}]'")
    Console(width=200).print(table)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
