module nodemedic.test/k8s-images

go 1.22
