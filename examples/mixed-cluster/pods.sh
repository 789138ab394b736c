#!/bin/sh
# Prints the README walkthrough's pods as YAML: `sh pods.sh [COUNT] | kubectl create -f -`.
# Pod i runs on bbc-(i/2 mod 10) when i is even, on ecs-(i/2 mod 10) when odd; every third
# pod (i divisible by 3) also joins the OVN overlay through podnet.io/networks.
count=${1:-300}
i=0
while [ "$i" -lt "$count" ]; do
  if [ $((i % 2)) -eq 0 ]; then node=bbc-$((i / 2 % 10)); else node=ecs-$((i / 2 % 10)); fi
  networks=""
  if [ $((i % 3)) -eq 0 ]; then networks=", annotations: {podnet.io/networks: overlay}"; fi
  cat <<YAML
---
apiVersion: v1
kind: Pod
metadata: {name: web-$i, namespace: default$networks}
spec:
  nodeName: $node
  containers: [{name: web, image: nginx}]
YAML
  i=$((i + 1))
done
