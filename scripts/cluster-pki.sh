#!/usr/bin/env bash
# Certificates and kubeconfigs of the one-node cluster, made with openssl under $PKI (RSA keys:
# Spark's Kubernetes client cannot read a PKCS#8 EC client key). Sourced by cluster-up.sh.

pki_cert() { # name subject [subjectAltName]
  local name=$1 subject=$2 san=${3:-}
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -subj "$subject" \
    -out "$PKI/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    [ -n "$san" ] && echo "subjectAltName=$san"
  } >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
    -CAcreateserial -days 30 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

pki_kubeconfig() { # file cert-name server
  local cert=$2
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: updatestream-node
  cluster:
    server: $3
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $cert
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$cert.crt")
    client-key-data: $(base64 -w0 "$PKI/$cert.key")
contexts:
- name: updatestream-node
  context: {cluster: updatestream-node, user: $cert}
current-context: updatestream-node
EOF
  chmod 600 "$1"
}

make_pki() {
  mkdir -p "$PKI"
  chmod 700 "$PKI"
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -days 30 \
    -subj "/CN=updatestream-node-ca" -out "$PKI/ca.crt" 2>/dev/null
  local names="DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  names+=",DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:$BRIDGE_IP"
  names+=",IP:$KUBERNETES_SERVICE_IP"
  pki_cert apiserver "/CN=kube-apiserver" "$names"
  pki_cert admin "/O=system:masters/CN=updatestream-admin"
  pki_cert node "/O=system:nodes/CN=system:node:$NODE_NAME"
  pki_cert controller-manager "/CN=system:kube-controller-manager"
  pki_cert scheduler "/CN=system:kube-scheduler"
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  local server="https://$BRIDGE_IP:$APISERVER_PORT"
  pki_kubeconfig "$KUBECONFIG_ADMIN" admin "$server"
  pki_kubeconfig "$PKI/node.kubeconfig" node "$server"
  pki_kubeconfig "$PKI/controller-manager.kubeconfig" controller-manager "$server"
  pki_kubeconfig "$PKI/scheduler.kubeconfig" scheduler "$server"
}
